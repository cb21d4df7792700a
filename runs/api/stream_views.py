"""`GET /api/v1/runs/{id}/stream`: a run's events as Server-Sent Events (SPEC §9.2).

The DRF view does what any view does, in a thread: authenticate (a key, or a stream ticket),
find the run in scope, validate the query and the resume cursor. It answers an error as
the JSON envelope, or a placeholder carrying the stream; `sse_route`, the async view the
URL points at, swaps the placeholder for the `text/event-stream` response, iterated on the
event loop (runs/streams.py: no thread, no connection while waiting).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, ClassVar

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api, conf, sse
from agentrun.auth import ApiKeyAuthentication, IsAuthenticatedKey
from agentrun.stream_tickets import TicketAuthentication, require_ticket_resource
from agentrun.tenancy import Scope
from agentrun.validation import INT4_MAX, StrictSerializer, validate_path_id
from runs import selectors
from runs.api.long_poll import released_after
from runs.models import EventType, Run
from runs.streams import RUN_STREAM_ID, run_stream
from runs.waiting import reread_slot

# What a stream view's `open_stream` gives: the events, and the stream's label for the logs.
OpenedStream = tuple[AsyncIterator[sse.StreamEvent | None], str]
STREAM_AUTHENTICATION = [ApiKeyAuthentication, TicketAuthentication]
LAST_EVENT_ID = OpenApiParameter(
    "Last-Event-ID",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Resume after this event id (a browser's EventSource sends it when it "
    "reconnects); wins over the query's cursor.",
)
SSE_MESSAGE = {
    "type": "object",
    "description": "One Server-Sent Events message.",
    "properties": {
        "id": {"type": "string", "description": "The resume cursor: send it as Last-Event-ID."},
        "event": {"type": "string", "enum": list(EventType.values)},
        "data": {
            "type": "string",
            "description": "The event JSON, as GET /runs/{id}/events returns it.",
        },
    },
    "required": ["data"],
}
TICKET_FLOW = (
    "Authenticate with `Authorization: Bearer <key>`, or (browsers: `EventSource` sends no "
    "header) with `?ticket=` from `POST /api/v1/stream-tickets`: signed, for this one "
    "resource, valid for minutes. A forged or expired ticket is a 401 envelope; a ticket "
    "for another resource is a 404. A comment line (`: heartbeat`) comes every 15 s while "
    "idle; the first message is a `retry:` hint."
)


def stream_schema(
    operation_id: str, query: type[Any], description: str
) -> Callable[[Callable[..., Response]], Callable[..., Response]]:
    """The OpenAPI description of a stream route: SSE, its query, `Last-Event-ID`; each
    message is described as an object of its fields (what SSE-aware tools check)."""
    response = OpenApiResponse(SSE_MESSAGE, description=f"{description} {TICKET_FLOW}")
    return extend_schema(
        operation_id=operation_id,
        parameters=[query, LAST_EVENT_ID],
        responses={(200, sse.MEDIA_TYPE): response},
    )


def can_hold_stream(request: Request) -> bool:
    """Under ASGI a stream waits for new events; under WSGI (the test client, a WSGI
    deployment) it sends what is there and ends, and the client resumes from its last id."""
    return isinstance(request._request, ASGIRequest)


def sse_stream_response(
    placeholder: Response, stream: AsyncIterator[sse.StreamEvent | None], label: str
) -> Response:
    """The placeholder a stream view answers with: `sse_route` serves `stream` instead."""
    placeholder.sse_stream = (stream, label)  # type: ignore[attr-defined]
    return placeholder


def _allow_origin(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """CORS for a page of an allowed origin (AGENTRUN_STREAM_ALLOWED_ORIGINS): a ticket,
    not a cookie, authenticates it, so no credentials are allowed."""
    origin = request.headers.get("Origin")
    if origin and origin in conf.stream_allowed_origins():
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Allow-Headers"] = "Last-Event-ID, Authorization"
        response["Access-Control-Allow-Methods"] = "GET"
        response["Vary"] = "Origin"
    return response


def sse_route(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """The async view of a stream route around its DRF view (module doc)."""

    @functools.wraps(drf_view)  # keeps `cls` and csrf_exempt: the schema sees DRF
    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "OPTIONS" and request.headers.get("Origin"):
            return _allow_origin(request, HttpResponse(status=204))  # a CORS preflight
        async with reread_slot():  # auth and the cursor check read the database
            response: Response = await sync_to_async(released_after(drf_view))(
                request, *args, **kwargs
            )
        stream = getattr(response, "sse_stream", None)
        if stream is None:
            return _allow_origin(request, response)  # an error envelope
        events, label = stream
        return _allow_origin(request, sse.sse_response(events, label=label))

    return view


class StreamNegotiation(DefaultContentNegotiation):
    """A stream route answers SSE or a JSON error whatever `Accept` says (EventSource sends
    `text/event-stream`, which no DRF renderer offers): the placeholder and errors are JSON."""

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, str(renderer.media_type)


# What every stream route's query takes: the ticket a browser authenticates with.
class StreamQuery(StrictSerializer):
    ticket = serializers.CharField(required=False, help_text="A stream ticket (browsers).")


# A stream route's DRF view: a key or a stream ticket, SSE or a JSON error. `get` makes
# the checks every stream route makes, in this order: the path id, the ticket's resource,
# the `kind` in scope (`find`: a 404 if not), the query, the `Last-Event-ID` cursor; then
# `open_stream` says what to stream. A subclass documents `get` with
# `extend_schema_view(get=stream_schema(...))`. (Comments, not a docstring: the schema
# would show it as each stream route's description.)
class StreamView(APIView):
    authentication_classes = STREAM_AUTHENTICATION
    content_negotiation_class = StreamNegotiation
    kind: ClassVar[str]
    query_class: ClassVar[type[StreamQuery]]
    id_pattern: ClassVar[str]

    def find(self, scope: Scope, pk: str) -> Any:
        raise NotImplementedError

    def open_stream(
        self, found: Any, query: dict[str, Any], resume: str | None, *, wait: bool
    ) -> OpenedStream:
        raise NotImplementedError

    def get(self, request: Request, pk: str) -> Response:
        validate_path_id(pk)
        require_ticket_resource(request, kind=self.kind, resource_id=pk)
        found = self.find(api.request_scope(request), pk)
        query = api.query(self.query_class, request)
        resume = sse.last_event_id(request.headers.get("Last-Event-ID"), pattern=self.id_pattern)
        stream, label = self.open_stream(found, query, resume, wait=can_hold_stream(request))
        return sse_stream_response(Response(status=200), stream, label)


class RunStreamQuery(StreamQuery):
    after_seq = serializers.IntegerField(min_value=0, max_value=INT4_MAX, default=0)
    follow = serializers.BooleanField(
        default=False, help_text="Stay open after the run's terminal_status event."
    )


@extend_schema_view(
    get=stream_schema(
        "runs_stream",
        RunStreamQuery,
        "Server-Sent Events: `id: <seq>`, `event: <event type>` (an EventType: "
        "user_message, agent_message, terminal_status, …), `data: <the event JSON as GET "
        "/runs/{id}/events returns it>`. Ends after the terminal_status event unless "
        "`follow=true`.",
    )
)
class RunStreamView(StreamView):
    permission_classes = [IsAuthenticatedKey]
    kind = "run"
    query_class = RunStreamQuery
    id_pattern = RUN_STREAM_ID

    def find(self, scope: Scope, pk: str) -> Run:
        return selectors.get_run_for(scope=scope, run_id=pk)

    def open_stream(
        self, found: Run, query: dict[str, Any], resume: str | None, *, wait: bool
    ) -> OpenedStream:
        after_seq = int(resume) if resume is not None else query["after_seq"]
        stream = run_stream(run_id=found.id, after_seq=after_seq, follow=query["follow"], wait=wait)
        return stream, f"run {found.id}"
