"""Errors of the Agents API routes in the shape the `openai` SDK parses.

The SDK raises its typed exception from the status (`BadRequestError` 400,
`AuthenticationError` 401, `PermissionDeniedError` 403, `NotFoundError` 404,
`ConflictError` 409, `RateLimitError` 429, `InternalServerError` 5xx) and reads
`message`, `type`, `param` and `code` from the body's `error` object. agentrun's own
envelope (`agentrun.errors`) is kept and completed with `type` and `param`, so both kinds
of client read it. `x-should-retry: false` on every 4xx but 429: the SDK retries a 409 by
default, and a busy session or a reused idempotency key is not a lock timeout to retry.
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response

from agentrun.errors import exception_handler

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def sdk_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None or not isinstance(response.data, dict):
        return response
    error = response.data.get("error")
    if isinstance(error, dict):
        status = response.status_code
        error["type"] = ERROR_TYPES.get(status, "server_error" if status >= 500 else "error")
        error["param"] = (error.get("details") or {}).get("field")
    if 400 <= response.status_code < 500 and response.status_code != 429:
        response["x-should-retry"] = "false"
    return response
