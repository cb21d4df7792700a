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
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api, sse
from agentrun.auth import ApiKeyAuthentication, IsAuthenticatedKey
from agentrun.stream_tickets import TicketAuthentication, require_ticket_resource
from agentrun.validation import StrictSerializer, validate_path_id
from runs import selectors
from runs.api.views import released_after
from runs.streams import RUN_STREAM_ID, run_stream
from runs.waiting import reread_slot

STREAM_AUTHENTICATION = [ApiKeyAuthentication, TicketAuthentication]
LAST_EVENT_ID = OpenApiParameter(
    "Last-Event-ID",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Resume after this event id (a browser's EventSource sends it when it "
    "reconnects); wins over the query's cursor.",
)
TICKET_FLOW = (
    "Authenticate with `Authorization: Bearer <key>`, or (browsers: `EventSource` sends no "
    "header) with `?ticket=` from `POST /api/v1/stream-tickets`: signed, for this one "
    "resource, valid for minutes. A forged or expired ticket is a 401 envelope; a ticket "
    "for another resource is a 404. A comment line (`: heartbeat`) comes every 15 s while "
    "idle; the first message is a `retry:` hint."
)


def sse_stream_response(
    placeholder: Response, stream: AsyncIterator[sse.StreamEvent | None], label: str
) -> Response:
    """The placeholder a stream view answers with: `sse_route` serves `stream` instead."""
    placeholder.sse_stream = (stream, label)  # type: ignore[attr-defined]
    return placeholder


def sse_route(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """The async view of a stream route around its DRF view (module doc)."""

    @functools.wraps(drf_view)  # keeps `cls` and csrf_exempt: the schema sees DRF
    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        async with reread_slot():  # auth and the cursor check read the database
            response: Response = await sync_to_async(released_after(drf_view))(
                request, *args, **kwargs
            )
        stream = getattr(response, "sse_stream", None)
        if stream is None:
            return response  # an error envelope
        events, label = stream
        return sse.sse_response(events, label=label)

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


class RunStreamQuery(StrictSerializer):
    after_seq = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)
    follow = serializers.BooleanField(
        default=False, help_text="Stay open after the run's terminal_status event."
    )
    ticket = serializers.CharField(required=False, help_text="A stream ticket (browsers).")


class RunStreamView(APIView):
    authentication_classes = STREAM_AUTHENTICATION
    content_negotiation_class = StreamNegotiation
    permission_classes = [IsAuthenticatedKey]

    @extend_schema(
        operation_id="runs_stream",
        parameters=[RunStreamQuery, LAST_EVENT_ID],
        responses={
            (200, sse.MEDIA_TYPE): OpenApiResponse(
                OpenApiTypes.STR,
                description="Server-Sent Events: `id: <seq>`, `event: <event type>` (an "
                "EventType: user_message, agent_message, terminal_status, …), `data: <the "
                "event JSON as GET /runs/{id}/events returns it>`. Ends after the "
                "terminal_status event unless `follow=true`. " + TICKET_FLOW,
            )
        },
    )
    def get(self, request: Request, pk: str) -> Response:
        validate_path_id(pk)
        require_ticket_resource(request, kind="run", resource_id=pk)
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        query = api.query(RunStreamQuery, request)
        resume = sse.last_event_id(request.headers.get("Last-Event-ID"), pattern=RUN_STREAM_ID)
        after_seq = int(resume) if resume is not None else query["after_seq"]
        stream = run_stream(run_id=run.id, after_seq=after_seq, follow=query["follow"])
        return sse_stream_response(Response(status=200), stream, f"run {run.id}")
