"""OpenAPI document extensions: how drf-spectacular describes our API.

- the API key auth scheme (`ApiKeyScheme`);
- JSON object fields typed as objects, not as "any value" (`JsonObjectFieldExtension`);
- `AgentRunAutoSchema`: our `list` actions answer one object (a page with `items`), so a
  list action is an array only when its response serializer says `many=True`;
- `document_errors` (a postprocessing hook): every operation documents the error envelope
  for the statuses it can answer, and request bodies, read by strict serializers, forbid
  keys they do not declare (`additionalProperties: false`).

Found by the schemathesis run (tests/fuzz): without these, the document promised arrays
where pages came back, allowed `null` and lists where objects were required, and
documented no error answer at all.
"""

from __future__ import annotations

import functools
from typing import Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import is_list_serializer
from drf_spectacular.utils import inline_serializer


class _FixedScheme(OpenApiAuthenticationExtension):
    """An auth scheme whose security definition is a constant (`definition`). No
    `target_class`: drf-spectacular matches only the subclasses."""

    definition: dict[str, Any] = {}

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return dict(self.definition)


class ApiKeyScheme(_FixedScheme):
    target_class = "agentrun.auth.ApiKeyAuthentication"
    name = "ApiKey"
    definition = {
        "type": "http",
        "scheme": "bearer",
        "description": "An agentrun API key: `Authorization: Bearer ar_<role>_…`. "
        "Create one with `manage.py create_api_key`.",
    }


class StreamTicketScheme(_FixedScheme):
    target_class = "agentrun.stream_tickets.TicketAuthentication"
    name = "StreamTicket"
    definition = {
        "type": "apiKey",
        "in": "query",
        "name": "ticket",
        "description": "A stream ticket from `POST /api/v1/stream-tickets` (stream "
        "routes only): for browsers, whose EventSource sends no Authorization header.",
    }


class JsonObjectFieldExtension(OpenApiSerializerFieldExtension):
    """`BoundedJSONObjectField` accepts a JSON object only (and `null` when it allows it)."""

    target_class = "agentrun.validation.BoundedJSONObjectField"
    match_subclasses = True  # e.g. runs.api.serializers.DispatchField

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "additionalProperties": {}}
        if self.target.allow_null:
            schema["nullable"] = True
        return schema


class AgentRunAutoSchema(AutoSchema):
    def _is_list_view(self, serializer: Any = None) -> bool:
        # Without a serializer drf-spectacular asks for the operation id ("…_list"): keep
        # its answer. For a response body, only a `many=True` serializer is an array.
        if serializer is None:
            return bool(super()._is_list_view())
        if isinstance(serializer, dict) and serializer:
            serializer = serializer[min(serializer, key=str)]
        return bool(is_list_serializer(serializer))


@functools.cache
def items_of(serializer_class: type[Any]) -> Any:
    """The `{"items": [...]}` answer of a collection that is not paged (one component per
    item serializer, however many operations answer it)."""
    return inline_serializer(
        name=f"{serializer_class.__name__.removesuffix('Out')}Items",
        fields={"items": serializer_class(many=True)},
    )


ERROR_ENVELOPE = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "failure_kind", "message", "details"],
            "properties": {
                "code": {"type": "string"},
                "failure_kind": {"type": "string", "nullable": True},
                "message": {"type": "string"},
                "details": {"type": "object", "additionalProperties": {}},
            },
        }
    },
}
_ERRORS = {
    "400": "Invalid input: the message names the field.",
    "401": "No key, or an unknown or revoked key.",
    "403": "The key's role may not call this operation.",
    "404": "Not found, or not visible to this key (another tenant's object).",
    "409": "Conflict with the current state (busy, stale lease, idempotency mismatch, …).",
    "413": "The request body is larger than the server accepts.",
}
_WRITE_ONLY = {"409", "413"}


def document_errors(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: error envelopes on every /api/v1 operation; strict request
    bodies."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_ENVELOPE
    reference = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for path, operations in result.get("paths", {}).items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            writes = method in ("post", "put", "patch", "delete")
            for code, description in _ERRORS.items():
                if code not in _WRITE_ONLY or writes:
                    operation["responses"].setdefault(
                        code, {"description": description, "content": reference}
                    )
    for name, schema in components.items():
        if name.endswith("Request") and schema.get("type") == "object":
            schema.setdefault("additionalProperties", False)
    return result
