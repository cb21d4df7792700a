"""Django's error handlers (handler400/403/404/500 in agentrun/urls.py) as the JSON envelope.

Django answers some errors before or outside any DRF view: an unknown URL, a bad Host, a
query string of more than DATA_UPLOAD_MAX_NUMBER_FIELDS fields, an unhandled exception.
Every route but the admin's speaks JSON, so these do too; `/admin/` keeps Django's pages.
A 500 caused by an exhausted connection pool is a 503 `database_busy` with Retry-After:
the client should retry, and nothing failed.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from agentrun.errors import (
    AgentRunError,
    database_busy,
    error_for,
    error_headers,
    is_database_busy,
    log_busy,
)

ADMIN_PREFIX = "/admin/"


def wants_html(request: HttpRequest) -> bool:
    return request.path.startswith(ADMIN_PREFIX)


def envelope_response(error: AgentRunError, exc: BaseException | None = None) -> JsonResponse:
    return JsonResponse(
        error.as_json(), status=error.http_status, headers=error_headers(error, exc)
    )


def _generic(status: int, code: str, message: str) -> AgentRunError:
    return AgentRunError(message, code=code, http_status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_html(request):
        return defaults.bad_request(request, exception)
    error = error_for(exception) or _generic(400, "bad_request", "bad request")
    return envelope_response(error, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_html(request):
        return defaults.permission_denied(request, exception)
    return envelope_response(AgentRunError("forbidden", code="forbidden", http_status=403))


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if wants_html(request):
        return defaults.page_not_found(request, exception)
    error = AgentRunError(
        f"no route for {request.path}", code="not_found", http_status=404, details={}
    )
    return envelope_response(error)


def server_error(request: HttpRequest) -> HttpResponse:
    exc = sys.exc_info()[1]  # Django calls this inside its except block
    if is_database_busy(exc):
        busy = database_busy()
        return log_busy(envelope_response(busy, exc), busy, request.path)
    if wants_html(request):
        return defaults.server_error(request)
    error = _generic(500, "internal_error", "the server failed to answer; see its log")
    return envelope_response(error)
