"""One error type for the whole service and the handler that renders it.

Services raise `AgentRunError` (usually through the factories below); the DRF exception
handler renders it, and every DRF or Django error, as SPEC §3's envelope:
`{"error": {"code", "failure_kind", "message", "details"}}` with the matching status.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

SCHEMA_INVALID = "schema-invalid"
INFRA_FAILED = "infra-failed"


class AgentRunError(Exception):
    """A domain error with a stable `code`, a seed `failure_kind` and an HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        http_status: int,
        failure_kind: str | None = SCHEMA_INVALID,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status
        self.failure_kind = failure_kind
        self.details = details or {}

    def as_json(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "failure_kind": self.failure_kind,
                "message": self.message,
                "details": self.details,
            }
        }


def invalid(message: str, *, field: str | None = None, **details: Any) -> AgentRunError:
    if field is not None:
        details["field"] = field
    return AgentRunError(message, code="invalid", http_status=400, details=details)


def not_found(kind: str, object_id: str) -> AgentRunError:
    return AgentRunError(
        f"{kind} {object_id} was not found",
        code="not_found",
        http_status=404,
        details={"kind": kind, "id": object_id},
    )


def conflict(
    message: str,
    *,
    code: str = "conflict",
    failure_kind: str | None = SCHEMA_INVALID,
    **details: Any,
) -> AgentRunError:
    return AgentRunError(
        message, code=code, http_status=409, failure_kind=failure_kind, details=details
    )


def lease_conflict(message: str, **details: Any) -> AgentRunError:
    return conflict(
        message, code="runner-lease-conflict", failure_kind="runner-lease-conflict", **details
    )


def stale_lease(message: str, **details: Any) -> AgentRunError:
    return conflict(message, code="stale_lease", failure_kind="runner-lease-conflict", **details)


def not_ready(message: str, **details: Any) -> AgentRunError:
    return AgentRunError(
        message, code="not_ready", http_status=503, failure_kind=INFRA_FAILED, details=details
    )


def _validation_message(detail: Any, path: str = "") -> tuple[str, str]:
    """The first (field path, message) of a DRF validation error tree."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = path if key == "non_field_errors" else f"{path}.{key}" if path else str(key)
            return _validation_message(value, name)
    if isinstance(detail, list) and detail:
        for index, item in enumerate(detail):
            if item:
                sub = path if not isinstance(item, (dict, list)) else f"{path}[{index}]"
                return _validation_message(item, sub)
    return path, str(detail)


def _from_drf(exc: exceptions.APIException) -> AgentRunError:
    if isinstance(exc, exceptions.ValidationError):
        field, message = _validation_message(exc.detail)
        text = f"{field}: {message}" if field else message
        return AgentRunError(
            text,
            code="invalid",
            http_status=400,
            details={"field": field or None, "errors": exc.detail},
        )
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        return AgentRunError(
            str(exc.detail), code="unauthorized", http_status=401, failure_kind=None
        )
    if isinstance(exc, exceptions.PermissionDenied):
        return AgentRunError(str(exc.detail), code="forbidden", http_status=403, failure_kind=None)
    if isinstance(exc, exceptions.NotFound):
        return AgentRunError(str(exc.detail), code="not_found", http_status=404)
    code = "invalid" if exc.status_code == 400 else str(exc.default_code)
    return AgentRunError(str(exc.detail), code=code, http_status=exc.status_code)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: every error leaves as the one envelope."""
    if isinstance(exc, Http404):
        error = AgentRunError("not found", code="not_found", http_status=404)
    elif isinstance(exc, RequestDataTooBig):
        error = AgentRunError(
            f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes",
            code="request_too_large",
            http_status=413,
            details={"max_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
        )
    elif isinstance(exc, DjangoPermissionDenied):
        error = AgentRunError("forbidden", code="forbidden", http_status=403, failure_kind=None)
    elif isinstance(exc, DjangoValidationError):
        error = invalid("; ".join(exc.messages))
    elif isinstance(exc, exceptions.APIException):
        error = _from_drf(exc)
    elif isinstance(exc, AgentRunError):
        error = exc
    else:
        return None
    set_rollback()
    response = Response(error.as_json(), status=error.http_status)
    if error.http_status == status.HTTP_401_UNAUTHORIZED:
        response["WWW-Authenticate"] = 'Bearer realm="agentrun"'
    if "retry_after_s" in error.details:
        response["Retry-After"] = str(error.details["retry_after_s"])
    return response


def throttled(message: str, *, retry_after: int) -> AgentRunError:
    """A 429; the handler sends `Retry-After: <retry_after>` with it."""
    return AgentRunError(
        message,
        code="throttled",
        http_status=429,
        failure_kind=None,
        details={"retry_after_s": retry_after},
    )
