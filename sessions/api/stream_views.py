"""`GET /api/v1/sessions/{id}/stream` and `POST /api/v1/stream-tickets` (SPEC §9.2).

The session stream is served like the run stream (runs/api/stream_views.py: a DRF view
checks, `sse_route` streams on the event loop). Tickets are issued here, above both apps,
because a ticket is checked against the run or session the key may read.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api
from agentrun.auth import IsClientOrOperator, request_key
from agentrun.errors import invalid
from agentrun.stream_tickets import issue_ticket
from agentrun.tenancy import Scope
from agentrun.validation import IdField, StrictSerializer
from runs import selectors as run_selectors
from runs.api.stream_views import (
    OpenedStream,
    StreamQuery,
    StreamView,
    stream_schema,
)
from sessions import selectors
from sessions.models import Session
from sessions.streams import SESSION_STREAM_ID, parse_position, session_stream


class SessionStreamQuery(StreamQuery):
    only = serializers.ChoiceField(
        choices=["output"],
        required=False,
        help_text="`output`: only what GET /sessions/{id}/output shows.",
    )


@extend_schema_view(
    get=stream_schema(
        "sessions_stream",
        SessionStreamQuery,
        "Server-Sent Events of every run of the session, runs in admission order, each up "
        "to its terminal_status: `id: <run id>:<seq>`, `event: <event type>`, `data: <the "
        "event JSON as GET /runs/{id}/events returns it>`. Resume with `Last-Event-ID`, "
        "across runs. Stays open while the session exists.",
    )
)
class SessionStreamView(StreamView):
    permission_classes = [IsClientOrOperator]
    kind = "session"
    query_class = SessionStreamQuery
    id_pattern = SESSION_STREAM_ID

    def find(self, scope: Scope, pk: str) -> Session:
        return selectors.get_session_for(scope=scope, session_id=pk)

    def open_stream(
        self, found: Session, query: dict[str, Any], resume: str | None, *, wait: bool
    ) -> OpenedStream:
        position = parse_position(found.session_id, resume)
        stream = session_stream(
            session_id=found.session_id,
            position=position,
            output_only=query.get("only") == "output",
            wait=wait,
        )
        return stream, f"session {found.session_id}"


class StreamTicketIn(StrictSerializer):
    run_id = IdField(required=False)
    session_id = IdField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if len(attrs) != 1:
            raise invalid("give exactly one of run_id and session_id")
        return attrs


class StreamTicketOut(serializers.Serializer[Any]):
    ticket = serializers.CharField()
    expires_at = serializers.DateTimeField()
    run_id = serializers.CharField(required=False)
    session_id = serializers.CharField(required=False)


class StreamTicketView(APIView):
    permission_classes = [IsClientOrOperator]

    @extend_schema(
        operation_id="stream_tickets_create",
        request=StreamTicketIn,
        responses={201: StreamTicketOut},
        description="A short-lived ticket for one run's or session's stream, for browsers: "
        "open `GET /api/v1/runs/{id}/stream?ticket=…` (or the session's) with EventSource. "
        "The key stays on the server that asked; the ticket opens that one stream only.",
    )
    def post(self, request: Request) -> Response:
        data = api.body(StreamTicketIn, request).validated_data
        scope = api.request_scope(request)
        if "run_id" in data:
            kind, resource_id = (
                "run",
                run_selectors.get_run_for(scope=scope, run_id=data["run_id"]).id,
            )
        else:
            session = selectors.get_session_for(scope=scope, session_id=data["session_id"])
            kind, resource_id = "session", session.session_id
        token, ticket = issue_ticket(
            api_key=request_key(request), kind=kind, resource_id=resource_id
        )
        out = {"ticket": token, "expires_at": ticket.expires_at, f"{kind}_id": resource_id}
        return Response(StreamTicketOut(out).data, status=201)
