"""Request middleware, each usable by the sync (WSGI, test client) and async (ASGI) handler.

Every middleware here is sync-and-async capable: one sync-only middleware makes Django's
ASGI handler run the whole chain, the async long-poll view included, in a thread that
blocks for the wait. So the route-latency observer lives here too (agentrun.metrics keeps
the histogram), and:

- LogContextMiddleware binds the request's id and the ids of its target to every log line;
- JsonErrorMiddleware renders the errors Django answers without an exception (a 405 from
  a plain view, a CSRF 403) as the JSON envelope outside `/admin/`, and turns an exhausted
  connection pool into 503 `database_busy` with Retry-After instead of a 500;
- the Browser* middleware are Django's session, CSRF, auth and messages middleware for
  every path but `/api/`: only the admin and the operations console (cookie sessions,
  CSRF-protected forms, flash messages) use them. An `/api/` request authenticates by its
  bearer key and every DRF view is CSRF-exempt, so there they only cost CPU (a session
  store, a lazy user and a message storage per request: issue 18, about a tenth of a
  gunicorn worker's on-CPU samples on the runner append). Each subclasses Django's own, so
  the admin's system checks still find them, and keeps its place in MIDDLEWARE; for an
  `/api/` path it hands the request straight on (sync or async: the inner handler's answer,
  awaitable or not, is returned as is).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware

from agentrun import logs
from agentrun.error_views import envelope_response, wants_html
from agentrun.errors import AgentRunError, database_busy, is_database_busy, log_busy
from agentrun.metrics import REQUEST_LATENCY, route_label

_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
# The first path segment after /api/v1/ names what the id in the URL is.
_ID_NAMES = {
    "runs": "run_id",
    "commands": "command_id",
    "sessions": "session_id",
    "tasks": "task_id",
    "runner-jobs": "runner_job_id",
}
# Headers of a plain error response that the envelope keeps.
_KEPT_HEADERS = ("Allow", "Retry-After", "WWW-Authenticate")
Handler = Callable[[HttpRequest], Any]


def _target_ids(path: str) -> dict[str, str]:
    parts = [p for p in path.split("/") if p]
    ids = {}
    for index, part in enumerate(parts[:-1]):
        name = _ID_NAMES.get(part)
        if name and index >= 2:
            ids[name] = parts[index + 1][:200]
    return ids


class _Both:
    """Base: `around(request, call)` wraps the inner handler, called sync or awaited."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        started = self.before(request)
        return self.after(request, self.get_response(request), started)

    async def _acall(self, request: HttpRequest) -> Any:
        started = self.before(request)
        inner: Awaitable[HttpResponseBase] = self.get_response(request)
        return self.after(request, await inner, started)

    def before(self, request: HttpRequest) -> Any:
        return None

    def after(self, request: HttpRequest, response: HttpResponseBase, state: Any) -> Any:
        return response


class RouteLatencyMiddleware(_Both):
    """Observes each request's latency under its resolved route pattern. Outermost, so it
    measures what the client waits for."""

    def before(self, request: HttpRequest) -> float:
        return time.perf_counter()

    def after(self, request: HttpRequest, response: HttpResponseBase, state: Any) -> Any:
        match = request.resolver_match
        method = request.method if request.method in _METHODS else "other"
        route = route_label(match.route) if match else "<unmatched>"
        REQUEST_LATENCY.labels(method, route, str(response.status_code)).observe(
            time.perf_counter() - state
        )
        return response


class LogContextMiddleware(_Both):
    """Binds the request id (X-Request-Id, or a new one) and the target's ids to the logs
    of everything the request does, and echoes the request id."""

    def __call__(self, request: HttpRequest) -> Any:
        # META, not `request.headers`: that builds the whole header map for one header,
        # ~2 % of a runner append's CPU (bench cell 2, issue 18); nothing else reads it.
        request_id = request.META.get("HTTP_X_REQUEST_ID", "")[:100] or uuid.uuid4().hex
        request.agentrun_request_id = request_id  # type: ignore[attr-defined]
        if self.is_async:
            return self._abound(request, request_id)
        with logs.bind(request_id=request_id, **_target_ids(request.path)):
            response = self.get_response(request)
        response["X-Request-Id"] = request_id
        return response

    async def _abound(self, request: HttpRequest, request_id: str) -> HttpResponseBase:
        with logs.bind(request_id=request_id, **_target_ids(request.path)):
            response: HttpResponseBase = await self.get_response(request)
        response["X-Request-Id"] = request_id
        return response


class JsonErrorMiddleware(_Both):
    """Plain error responses outside `/admin/` become the envelope; pool exhaustion a 503."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        if is_database_busy(exception):
            busy = database_busy()
            return log_busy(envelope_response(busy, exception), busy, request.path)
        return None

    def after(self, request: HttpRequest, response: HttpResponseBase, state: Any) -> Any:
        if response.status_code < 400 or wants_html(request):
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        error = AgentRunError(
            _reason(response), code=_code(response.status_code), http_status=response.status_code
        )
        envelope = envelope_response(error)
        envelope["Content-Length"] = str(len(envelope.content))  # outside CommonMiddleware
        for header in _KEPT_HEADERS:
            if header in response:
                envelope[header] = response[header]
        return envelope


def _reason(response: HttpResponseBase) -> str:
    return getattr(response, "reason_phrase", "") or f"HTTP {response.status_code}"


def _code(status: int) -> str:
    return {
        400: "bad_request",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        406: "not_acceptable",
        413: "request_too_large",
        415: "unsupported_media_type",
        429: "throttled",
    }.get(status, "internal_error" if status >= 500 else "error")


class StaticFilesMiddleware(_Both):
    """whitenoise's file serving in a middleware that is async-capable too: whitenoise's own
    middleware is sync-only, and one sync middleware makes Django run the whole chain in a
    thread per request — every waiting long-poll would hold a thread again."""

    def __init__(self, get_response: Handler) -> None:
        from whitenoise.middleware import WhiteNoiseMiddleware

        super().__init__(get_response)
        # Its lookup and response only: an inner handler answering None means "not a file".
        self._files = WhiteNoiseMiddleware(lambda request: None)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self._files(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> Any:
        served = self._files(request)
        if served is not None:
            return served
        inner: Awaitable[HttpResponseBase] = self.get_response(request)
        return await inner


API_PREFIX = "/api/"


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


class _BrowserOnly:
    """Mixed in before a Django middleware: an `/api/` request skips it."""

    get_response: Handler

    def __call__(self, request: HttpRequest) -> Any:
        if is_api(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]  # the Django middleware's


class BrowserSessionMiddleware(_BrowserOnly, SessionMiddleware):
    pass


class BrowserCsrfViewMiddleware(_BrowserOnly, CsrfViewMiddleware):
    """CSRF stays enforced on every path but `/api/`, whose DRF views are exempt anyway."""

    def process_view(
        self,
        request: HttpRequest,
        callback: Callable[..., HttpResponseBase],
        callback_args: tuple[Any, ...],
        callback_kwargs: dict[str, Any],
    ) -> Any:
        # Django's handler calls every middleware's process_view, whatever its __call__ did.
        if is_api(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class BrowserAuthenticationMiddleware(_BrowserOnly, AuthenticationMiddleware):
    pass


class BrowserMessageMiddleware(_BrowserOnly, MessageMiddleware):
    pass
