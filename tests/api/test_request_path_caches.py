"""The request path's precomputed checks give what the per-request ones gave.

`nests_deeper_than` (the parser's depth check) answers `json_depth(value) > limit` for any
value; `_plain_plan`, `_textual_choices` and `_json_rule` (the plain validation's per-class
and per-field answers, worked out once) follow a field whose choices change and a
serializer class with a `validate_<name>` hook. Bench cell 2 measures why they exist: per
item of a 100-event batch the parser queued every value and the validation recomputed
these answers.
"""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest
from rest_framework import serializers
from rest_framework.exceptions import ParseError

from agentrun.parsers import MAX_JSON_DEPTH, DepthLimitedJSONParser, json_depth, nests_deeper_than
from agentrun.validation import (
    _JSON_TYPES,
    FULL,
    LIST,
    VALUE,
    IdField,
    StrictSerializer,
    _json_rule,
    _json_type_error,
    _plain_attrs,
    _plain_plan,
)
from runs.api.serializers import EventAppendIn


def _random_value(rng: random.Random, depth: int) -> Any:
    if depth == 0 or rng.random() < 0.2:
        return rng.choice([1, "x", None, True, 2.5, [], {}])
    if rng.random() < 0.5:
        return {str(i): _random_value(rng, depth - 1) for i in range(rng.randint(0, 3))}
    return [_random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]


def test_nests_deeper_than_is_json_depth_past_the_limit() -> None:
    rng = random.Random(18)
    for _ in range(3000):
        value = _random_value(rng, rng.randint(0, 10))
        for limit in range(-1, 12):
            assert nests_deeper_than(value, limit) == (json_depth(value) > limit), (value, limit)


def _parse(text: str) -> Any:
    return DepthLimitedJSONParser().parse(io.BytesIO(text.encode()), "application/json", {})


def test_the_parser_takes_the_deepest_body_allowed_and_refuses_one_level_more() -> None:
    deepest = '{"x": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1) + "}"
    assert json_depth(_parse(deepest)) == MAX_JSON_DEPTH
    with pytest.raises(ParseError):
        _parse('{"x": ' + "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH + "}")


def _uncached_json_type_error(field: Any, value: Any) -> str | None:
    """`_json_type_error` as it was, every answer worked out per call."""
    if value is None:
        return None
    if isinstance(field, serializers.ChoiceField):
        textual = all(isinstance(choice, str) for choice in field.choices)
        return "expected a string" if textual and not isinstance(value, str) else None
    for kind, types, name in _JSON_TYPES:
        if isinstance(field, kind):
            ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
            return None if ok else f"expected {name}, got {type(value).__name__}"
    return None


FIELDS = [
    serializers.BooleanField(),
    serializers.CharField(),
    IdField(),
    serializers.DateTimeField(),
    serializers.IntegerField(),
    serializers.FloatField(),
    serializers.JSONField(),
    serializers.ChoiceField(choices=["a", "b"]),
    serializers.ChoiceField(choices=[1, 2]),
]
VALUES: list[Any] = [None, True, 0, 1, 2.5, "a", "", [], {}]


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: type(f).__name__)
def test_the_cached_json_type_rules_answer_as_the_loop_did(field: Any) -> None:
    for value in VALUES:
        assert _json_type_error(field, value) == _uncached_json_type_error(field, value)
    assert _json_rule(type(field)) is _json_rule(type(field))


def test_a_choice_field_whose_choices_change_is_asked_again() -> None:
    field = serializers.ChoiceField(choices=["a", "b"])
    assert _json_type_error(field, 1) == "expected a string"
    field.choices = [1, 2]
    assert _json_type_error(field, 1) is None
    field.choices = ["c"]
    assert _json_type_error(field, 1) == "expected a string"


class WithHook(StrictSerializer):
    plain_fast_path = True
    name = serializers.CharField()
    other = serializers.CharField(required=False)

    def validate_name(self, value: str) -> str:
        return value.upper()


def test_a_field_with_a_validate_hook_sends_the_body_to_the_full_path() -> None:
    assert [kind for _, _, kind in _plain_plan(WithHook)] == [FULL, VALUE]
    assert _plain_attrs(WithHook(), {"name": "x"}) is None
    assert _plain_attrs(WithHook(), {"other": "y"}) is None  # `name` is required
    serializer = WithHook(data={"name": "x"}, context={"json_body": True})
    assert serializer.is_valid() and serializer.validated_data == {"name": "X"}


def test_the_append_bodys_plan_is_worked_out_once() -> None:
    plan = _plain_plan(EventAppendIn)
    assert _plain_plan(EventAppendIn) is plan
    kinds = {name: kind for name, _, kind in plan}
    assert kinds["events"] == LIST and kinds["type"] == VALUE and kinds["payload"] == VALUE
    body = {"runner_id": "r", "lease_epoch": 1, "events": [{"type": "log", "payload": {}}] * 3}
    serializer = EventAppendIn(data=json.loads(json.dumps(body)), context={"json_body": True})
    assert serializer.is_valid(), serializer.errors
    assert [event.type for event in serializer.new_events()] == ["log"] * 3
