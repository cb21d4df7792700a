"""One error type for the whole service and the handler that renders it.

Services raise `AgentRunError` (usually through the factories below); the DRF exception
handler renders it, and every DRF or Django error, as SPEC §3's envelope:
`{"error": {"code", "failure_kind", "message", "details"}}` with the matching status.

The failure kind follows from the status (FAILURE_KINDS, one table), so a conflict never
says `schema-invalid`; a factory passes its own only where the error is more specific (a
lease conflict). Errors Django itself answers (an unknown URL, a 405 from a plain view, a
bad Host, too many fields, a server error) are rendered the same way by agentrun.error_views
and agentrun.middleware.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpResponseBase
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import set_rollback

log = logging.getLogger("agentrun.errors")
R = TypeVar("R", bound=HttpResponseBase)
SCHEMA_INVALID = "schema-invalid"
INFRA_FAILED = "infra-failed"
CONFLICT = "conflict"
RATE_LIMITED = "rate-limited"
# The failure kind of an error by its HTTP status: the request's shape (schema-invalid), the
# state it met (conflict), the service's capacity (rate-limited), the service itself
# (infra-failed). Auth, not-found and method errors name no failure: None.
FAILURE_KINDS: dict[int, str | None] = {
    400: SCHEMA_INVALID,
    401: None,
    403: None,
    404: None,
    405: None,
    406: SCHEMA_INVALID,
    409: CONFLICT,
    413: SCHEMA_INVALID,
    415: SCHEMA_INVALID,
    422: SCHEMA_INVALID,
    429: RATE_LIMITED,
}
# How long a client waits before retrying a 503 or 429 (the Retry-After header).
RETRY_AFTER_S = 1
_BY_STATUS: Any = object()  # failure_kind not given: FAILURE_KINDS decides


def failure_kind_for(http_status: int) -> str | None:
    if http_status >= 500:
        return INFRA_FAILED
    return FAILURE_KINDS.get(http_status, SCHEMA_INVALID)


class AgentRunError(Exception):
    """A domain error with a stable `code`, a seed `failure_kind` and an HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        http_status: int,
        failure_kind: str | None = _BY_STATUS,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status
        self.failure_kind = (
            failure_kind_for(http_status) if failure_kind is _BY_STATUS else failure_kind
        )
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
    failure_kind: str | None = _BY_STATUS,
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


def database_busy() -> AgentRunError:
    return AgentRunError(
        "the database is busy: no connection came free in time; retry",
        code="database_busy",
        http_status=503,
        details={"retry_after_s": RETRY_AFTER_S},
    )


# PostgreSQL refused a connection for a passing reason: too many clients, starting up.
_BUSY_SQLSTATES = {"53300", "57P03"}


def is_database_busy(exc: BaseException | None) -> bool:
    """The pool had no connection within its timeout (psycopg_pool.PoolTimeout, which
    Django wraps in its OperationalError), or the server refused a new one for now."""
    from psycopg_pool import PoolTimeout

    seen = 0
    while exc is not None and seen < 10:  # the cause chain; bounded against cycles
        if isinstance(exc, PoolTimeout):
            return True
        if isinstance(exc, psycopg.OperationalError) and exc.sqlstate in _BUSY_SQLSTATES:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _request_error(exc: SuspiciousOperation) -> AgentRunError:
    """Django's own request errors: a body too large, too many fields, a bad Host, …"""
    if isinstance(exc, RequestDataTooBig):
        return AgentRunError(
            f"the request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes",
            code="request_too_large",
            http_status=413,
            details={"max_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE},
        )
    return AgentRunError(str(exc) or "bad request", code="bad_request", http_status=400)


def error_for(exc: BaseException) -> AgentRunError | None:
    """The envelope error for an exception, or None for an unexpected one (a 500)."""
    if isinstance(exc, AgentRunError):
        return exc
    if isinstance(exc, Http404):
        return AgentRunError("not found", code="not_found", http_status=404)
    if isinstance(exc, SuspiciousOperation):
        return _request_error(exc)
    if isinstance(exc, DjangoPermissionDenied):
        return AgentRunError("forbidden", code="forbidden", http_status=403, failure_kind=None)
    if isinstance(exc, DjangoValidationError):
        return invalid("; ".join(exc.messages))
    if isinstance(exc, exceptions.APIException):
        return _from_drf(exc)
    if is_database_busy(exc):
        return database_busy()
    return None


def error_headers(error: AgentRunError, exc: BaseException | None = None) -> dict[str, str]:
    headers = {}
    if error.http_status == status.HTTP_401_UNAUTHORIZED:
        headers["WWW-Authenticate"] = 'Bearer realm="agentrun"'
    if "retry_after_s" in error.details:
        headers["Retry-After"] = str(error.details["retry_after_s"])
    elif error.http_status in (429, 503):
        wait = getattr(exc, "wait", None)
        headers["Retry-After"] = str(max(1, int(wait)) if wait else RETRY_AFTER_S)
    return headers


def log_busy(response: R, error: AgentRunError, path: str) -> R:
    """A 503 for want of a connection is logged at WARNING, not as Django's ERROR per
    response: it is load, and the client retries."""
    if error.code == "database_busy":
        log.warning("database busy: no pooled connection in time for %s; answered 503", path)
        setattr(response, "_has_been_logged", True)  # noqa: B010  # log_response skips it
    return response


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler: every error leaves as the one envelope."""
    error = error_for(exc)
    if error is None:
        return None  # Django's handler500 (agentrun.error_views) renders it
    set_rollback()
    headers = error_headers(error, exc)
    response = Response(error.as_json(), status=error.http_status, headers=headers)
    request = context.get("request")
    return log_busy(response, error, request.path if request is not None else "?")


def throttled(message: str, *, retry_after: int) -> AgentRunError:
    """A 429; the handler sends `Retry-After: <retry_after>` with it."""
    return AgentRunError(
        message,
        code="throttled",
        http_status=429,
        failure_kind="rate-limited",
        details={"retry_after_s": retry_after},
    )
