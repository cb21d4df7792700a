"""Small pieces every app's API views share: input validation and response shapes.

Views stay thin (validate → one service or selector → serialize); these helpers are the
"validate" and "serialize" halves, written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

from django.db import models
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from agentrun.auth import request_key
from agentrun.errors import invalid
from agentrun.models import ApiKey, ApiKeyRole
from agentrun.tenancy import Scope
from agentrun.validation import validate_path_id
from agentrun.versions import is_unread

D = TypeVar("D")


def query(serializer_class: type[Any], request: Request) -> dict[str, Any]:
    """Validated query parameters (a strict serializer: unknown ones are a 400)."""
    return query_dict(serializer_class, request.query_params.dict())


def query_dict(serializer_class: type[Any], params: dict[str, Any]) -> dict[str, Any]:
    serializer = serializer_class(data=params)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def body(serializer_class: type[Any], request: Request) -> Any:
    """The request body, validated; the bound serializer is returned for its helpers."""
    serializer = serializer_class(data=request.data, context={"json_body": True})
    serializer.is_valid(raise_exception=True)
    return serializer


def created_or_replayed(instance: Any, serializer_class: type[Any], created: bool) -> Response:
    """201 for a new object, 200 for an idempotent replay of an existing one."""
    code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return Response(serializer_class(instance).data, status=code)


def row_fields(
    model: type[models.Model], *, hide: Collection[str] = (), then: Sequence[str] = ()
) -> list[str]:
    """A `ModelSerializer`'s `fields` for an output that shows its row whole: every column of
    `model` in the model's order (a foreign key by its `_id` name), less `hide`, then the
    computed fields `then`. One list per model instead of a copy of its columns in every
    output; a column added later is shown too, so what a tenant must not see goes in `hide`
    (tests/api/test_output_fields.py pins each output's keys, so a new one is a decision)."""
    unknown = set(hide) - {field.attname for field in model._meta.concrete_fields}
    assert not unknown, f"{model.__name__} has no column {sorted(unknown)}"
    columns = [field.attname for field in model._meta.concrete_fields]
    return [name for name in columns if name not in hide] + list(then)


def tenant_for_write(api_key: ApiKey, tenant_id: str | None) -> str:
    """The tenant a new object belongs to: a client's own; an operator must name one."""
    if api_key.role == ApiKeyRole.OPERATOR:
        if not tenant_id:
            raise invalid("tenant_id: an operator key must name the tenant", field="tenant_id")
        return tenant_id
    if tenant_id and tenant_id != api_key.tenant_id:
        raise invalid("tenant_id: a client key writes in its own tenant", field="tenant_id")
    return api_key.tenant_id


def request_scope(request: Request) -> Scope:
    """The tenant gate of the request's key: what its selectors and services may reach."""
    return Scope.of(request_key(request))


def cancel_arguments(serializer_class: type[Any], request: Request) -> dict[str, Any]:
    """Who cancels, within which tenant gate, and why: what every cancel service takes from
    a cancel endpoint's request (`requested_by` is the key's id, for the audit trail)."""
    data = body(serializer_class, request).validated_data
    key_id = request_key(request).id
    return {"scope": request_scope(request), "reason": data["reason"], "requested_by": key_id}


# Mixed into a versioned row's output (tasks, sessions): `unread`, changed since the reader
# named in the request last marked it read (null when none was named). A comment, not a
# docstring: drf-spectacular would print a docstring as every such schema's description.
class UnreadOut(serializers.Serializer[Any]):
    unread = serializers.SerializerMethodField()

    def get_unread(self, row: Any) -> bool | None:
        return is_unread(row)


class ObjectViewSet(viewsets.ViewSet):
    """A resource addressed by id: the id in the path is validated like any other input.
    `reserved_pk`: the caller chooses the id (a path that may create the object)."""

    lookup_value_regex = "[^/]+"
    reserved_pk = False

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authenticate and check permissions first
        if "pk" in kwargs:
            validate_path_id(kwargs["pk"], reserved=self.reserved_pk)


# An output with one integer field per name of `counted` (a tuple spelled once, by a
# model's enum or a selector's mapping, so output and selector cannot drift apart), placed
# after the declared field `counted_after` (None: after all declared fields). A comment,
# not a docstring: drf-spectacular would show a docstring as each subclass's description.
class CountsOut(serializers.Serializer[Any]):
    counted: tuple[str, ...] = ()
    counted_after: str | None = None

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        declared = super().get_fields()
        counts = {name: serializers.IntegerField() for name in self.counted}
        if self.counted_after is None:
            return {**declared, **counts}
        fields: dict[str, serializers.Field[Any, Any, Any, Any]] = {}
        for name, field in declared.items():
            fields[name] = field
            if name == self.counted_after:
                fields.update(counts)
        return fields


def as_dataclass(cls: type[D], data: dict[str, Any]) -> D:
    """The dataclass `cls` from validated data holding (at least) each of its fields: an
    input serializer's fields beyond them (a runner write's `runner_id`, …) are left out."""
    assert dataclasses.is_dataclass(cls)
    return cls(**{field.name: data[field.name] for field in dataclasses.fields(cls)})
