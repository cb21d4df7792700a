"""Input validation shared by every app's API: strict serializers and bounded fields.

DRF ignores unknown keys by default; SPEC §3 wants a 400 naming the field for unknown
fields, wrong types and oversize values, before anything reaches the database.
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import RegexValidator
from rest_framework import serializers
from rest_framework.fields import SkipField, empty

from agentrun.errors import invalid
from agentrun.hashing import canonical_json
from agentrun.ids import MAX_ID_LENGTH

KIB = 1024
MIB = 1024 * KIB
# PostgreSQL's integer and bigint bounds: a number past the column's is a 400 naming the
# field, not a DataError (a 500) from the database.
INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1


# What a JSON body must carry for a field of each kind. DRF coerces (`5` into "5", "true"
# into True); SPEC §3 wants a wrong type to be a 400. Query strings stay coercible: every
# query value is a string.
_JSON_TYPES: list[tuple[type[serializers.Field[Any, Any, Any, Any]], tuple[type, ...], str]] = [
    (serializers.BooleanField, (bool,), "a boolean"),
    (serializers.CharField, (str,), "a string"),
    (serializers.DateTimeField, (str,), "a string"),
    (serializers.IntegerField, (int,), "an integer"),
    (serializers.FloatField, (int, float), "a number"),
]


def _json_type_error(field: serializers.Field[Any, Any, Any, Any], value: Any) -> str | None:
    """Why `value` has the wrong JSON type for `field`, or None."""
    if value is None:
        return None  # `allow_null` decides
    if isinstance(field, serializers.ChoiceField):
        textual = _textual_choices(field)
        return "expected a string" if textual and not isinstance(value, str) else None
    rule = _json_rule(type(field))
    if rule is None:
        return None
    types, name = rule
    ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
    return None if ok else f"expected {name}, got {type(value).__name__}"


def _json_rule(field_class: type[Any]) -> tuple[tuple[type, ...], str] | None:
    """The JSON types a field of `field_class` takes (`_JSON_TYPES`' first match), found once
    per class."""
    if field_class not in _JSON_RULES:
        _JSON_RULES[field_class] = next(
            ((types, name) for kind, types, name in _JSON_TYPES if issubclass(field_class, kind)),
            None,
        )
    return _JSON_RULES[field_class]


_JSON_RULES: dict[type[Any], tuple[tuple[type, ...], str] | None] = {}


def _textual_choices(field: serializers.ChoiceField) -> bool:
    """Whether every choice of `field` is a string; kept on the field with the choices it was
    computed from (a batch asked it of the same `type` field once per event, each time
    walking every event type)."""
    choices = field.choices
    known = field.__dict__.get("_agentrun_textual_choices")
    if known is None or known[0] is not choices:
        known = (choices, all(isinstance(choice, str) for choice in choices))
        field._agentrun_textual_choices = known  # type: ignore[attr-defined]
    return bool(known[1])


# How `_plain_attrs` treats a declared field that is present in the body: validated by the
# field itself (VALUE), as a list of plain items (LIST), or only by the full path (FULL).
VALUE, LIST, FULL = "value", "list", "full"


def _plain_plan(serializer_class: type[Any]) -> list[tuple[str, Any, str]]:
    """Each declared field of `serializer_class` with how `_plain_attrs` treats it when
    present: what does not depend on the body, worked out once per class instead of once
    per body (and per item of a batch)."""
    declared = serializer_class._declared_fields
    known = _PLANS.get(serializer_class)
    if known is not None and known[0] is declared:
        return known[1]
    plan = [
        (name, field, _plain_kind(serializer_class, name, field))
        for name, field in declared.items()
    ]
    _PLANS[serializer_class] = (declared, plan)
    return plan


def _plain_kind(serializer_class: type[Any], name: str, field: Any) -> str:
    if type(field) is serializers.ListSerializer and field.source in (None, name):
        return LIST
    if (
        isinstance(field, serializers.BaseSerializer)
        or field.read_only
        or field.source not in (None, name)
        or hasattr(serializer_class, f"validate_{name}")
    ):
        return FULL
    return VALUE


_PLANS: dict[type[Any], tuple[Any, list[tuple[str, Any, str]]]] = {}


def _plain_attrs(serializer: serializers.Serializer[Any], data: Any) -> dict[str, Any] | None:
    """`data` validated by the class's declared fields themselves, unbound, when it uses only
    plain fields (and lists of plain `StrictSerializer` items) and passes every one of them;
    None when anything needs the full path (a null, a missing required field, any error),
    which then validates it again and answers the 400 in its usual shape."""
    declared = type(serializer)._declared_fields
    if type(data) is not dict or not data.keys() <= declared.keys():
        return None
    attrs = {}
    for name, field, kind in _plain_plan(type(serializer)):
        if name not in data:
            if field.required:
                return None
            if field.default is not empty:  # what DRF's path stores, unvalidated, for it
                attrs[name] = field.get_default()
            continue
        value = data[name]
        if kind == LIST:
            items = _plain_items(field, value)
            if items is None:
                return None
            attrs[name] = items
            continue
        if kind == FULL or value is None or _json_type_error(field, value):
            return None
        try:
            attrs[name] = field.run_validation(value)
        except (serializers.ValidationError, DjangoValidationError, SkipField):
            return None
    return attrs


def _plain_items(field: serializers.ListSerializer[Any], data: Any) -> list[Any] | None:
    """A list field's items validated as `_plain_attrs` validates a body (each item then
    through its serializer's `validate`), when the list and every item qualify; else None.
    A batch of runner events is this: each item validated once, by the shared fields."""
    child = field.child
    most, least = getattr(field, "max_length", None), getattr(field, "min_length", None)
    if (
        type(data) is not list
        or not isinstance(child, StrictSerializer)
        or field.validators
        or child.validators
        or (not data and not field.allow_empty)
        or (most is not None and len(data) > most)
        or (least is not None and len(data) < least)
    ):
        return None
    items = []
    for item in data:
        attrs = _plain_attrs(child, item)
        if attrs is None:
            return None
        try:
            items.append(child.validate(attrs))
        except (serializers.ValidationError, DjangoValidationError):
            return None
    return items


class StrictSerializer(serializers.Serializer[Any]):
    """A plain input serializer that rejects keys it does not declare and, for a JSON body
    (context `json_body`, set by `agentrun.api.body`), values of the wrong JSON type."""

    # A hot input sets this: a JSON body that uses only plain fields is validated by the
    # declared fields directly. `fields` deep-copies every declared field (a nested list
    # serializer too) per instance, which was most of the validation's CPU for the runner
    # append. Same field objects, same rules; any failure takes the full path for its 400.
    plain_fast_path = False

    def run_validation(self, data: Any = empty) -> Any:
        if self.plain_fast_path and self.context.get("json_body") and not self.validators:
            attrs = _plain_attrs(self, data)
            if attrs is not None:
                try:
                    return self.validate(attrs)
                except (serializers.ValidationError, DjangoValidationError):
                    pass  # raised again below, in DRF's shape
        return super().run_validation(data)

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": [f"expected a JSON object, got {type(data).__name__}"]}
            )
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({key: ["unknown field"] for key in unknown})
        if self.context.get("json_body"):
            wrong = {
                name: [error]
                for name, field in self.fields.items()
                if name in data and (error := _json_type_error(field, data[name]))
            }
            if wrong:
                raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


class IdField(serializers.CharField):
    """An identifier: a non-blank string of at most 200 characters."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", MAX_ID_LENGTH)
        kwargs.setdefault("allow_blank", False)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


# SPEC §9.7: an id a caller reserves (a run's, a session's) is one argv word that cannot
# be read as an option (no leading `-`), one URL path segment (no `/`), and one field of a
# `<run id>:<seq>` notification (no `:`). ASCII only, so what a person sees is what is stored.
RESERVED_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}"
_RESERVED_ID = RegexValidator(
    re.compile(rf"\A{RESERVED_ID_PATTERN}\Z"),
    message=(
        "must be 1-200 characters of letters, digits, '.', '_' and '-', "
        "starting with a letter or digit"
    ),
)


class ReservedIdField(IdField):
    """An id the caller chooses for a run or a session (SPEC §9.7's character set)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators.append(_RESERVED_ID)


# Built once: an unbound field keeps no state while it validates, so every request (and
# thread) can share it; building one per call was a visible share of a request's CPU.
_PATH_ID_FIELDS: dict[bool, IdField] = {False: IdField(), True: ReservedIdField()}


def validate_path_id(value: str, *, field: str = "id", reserved: bool = False) -> str:
    """An id taken from the URL path obeys the `IdField` rules (at most 200 characters, no
    NUL or lone surrogate), or is a 400 naming it: it must never reach the database as a
    500. A `reserved` id (a path that may create the object) obeys `ReservedIdField`."""
    try:
        return str(_PATH_ID_FIELDS[reserved].run_validation(value))
    except serializers.ValidationError as error:
        detail = error.detail[0] if isinstance(error.detail, list) else error.detail
        raise invalid(f"{field}: {detail}", field=field) from error


def _contains_nul(value: Any) -> bool:
    """Whether a key or string anywhere in `value` holds `\\u0000`, which jsonb refuses."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and "\x00" in item:
            return True
    return False


class BoundedJSONObjectField(serializers.JSONField):
    """A JSON object (not a list or scalar) whose canonical encoding fits `max_bytes` and
    that PostgreSQL can store as jsonb."""

    def __init__(self, *, max_bytes: int, allow_null: bool = False, **kwargs: Any) -> None:
        self.max_bytes = max_bytes
        super().__init__(allow_null=allow_null, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        # An object is encoded once, below: that is DRF's own `json.dumps` check as well (a
        # body's batch of events encoded each payload twice). Anything else takes DRF's.
        plain_object = type(data) is dict and not self.binary
        value = data if plain_object else super().to_internal_value(data)
        if value is None:
            return value
        if not isinstance(value, dict):
            raise serializers.ValidationError("expected a JSON object")
        try:
            text = canonical_json(value)
        except (TypeError, ValueError):
            self.fail("invalid")
        # JSON spells a NUL character as the escape `\\u0000`: text without it holds none.
        if "\\u0000" in text and _contains_nul(value):
            raise serializers.ValidationError("contains \\u0000, which cannot be stored")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as error:  # a lone surrogate such as "\\ud800"
            raise serializers.ValidationError("contains text that is not valid Unicode") from error
        if size > self.max_bytes:
            raise serializers.ValidationError(
                f"is {size} bytes; the limit is {self.max_bytes} bytes"
            )
        return value
