"""`GET /api/v1/sessions/{id}/stream` and `POST /api/v1/stream-tickets` (SPEC §9.2).

The session stream is served like the run stream (runs/api/stream_views.py: a DRF view
checks, `sse_route` streams on the event loop). Tickets are issued here, above both apps,
because a ticket is checked against the run or session the key may read.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api, sse
from agentrun.auth import IsClientOrOperator, request_key
from agentrun.errors import invalid
from agentrun.stream_tickets import issue_ticket, require_ticket_resource
from agentrun.validation import IdField, StrictSerializer, validate_path_id
from runs import selectors as run_selectors
from runs.api.stream_views import (
    LAST_EVENT_ID,
    STREAM_AUTHENTICATION,
    TICKET_FLOW,
    StreamNegotiation,
    sse_stream_response,
)
from sessions import selectors
from sessions.streams import SESSION_STREAM_ID, parse_position, session_stream


class SessionStreamQuery(StrictSerializer):
    only = serializers.ChoiceField(
        choices=["output"],
        required=False,
        help_text="`output`: only what GET /sessions/{id}/output shows.",
    )
    ticket = serializers.CharField(required=False, help_text="A stream ticket (browsers).")


class SessionStreamView(APIView):
    authentication_classes = STREAM_AUTHENTICATION
    content_negotiation_class = StreamNegotiation
    permission_classes = [IsClientOrOperator]

    @extend_schema(
        operation_id="sessions_stream",
        parameters=[SessionStreamQuery, LAST_EVENT_ID],
        responses={
            (200, sse.MEDIA_TYPE): OpenApiResponse(
                OpenApiTypes.STR,
                description="Server-Sent Events of every run of the session, runs in "
                "admission order, each up to its terminal_status: `id: <run id>:<seq>`, "
                "`event: <event type>`, `data: <the event JSON as GET /runs/{id}/events "
                "returns it>`. Resume with `Last-Event-ID`, across runs. Stays open while "
                "the session exists. " + TICKET_FLOW,
            )
        },
    )
    def get(self, request: Request, pk: str) -> Response:
        validate_path_id(pk)
        require_ticket_resource(request, kind="session", resource_id=pk)
        session = selectors.get_session_for(scope=api.request_scope(request), session_id=pk)
        query = api.query(SessionStreamQuery, request)
        cursor = sse.last_event_id(request.headers.get("Last-Event-ID"), pattern=SESSION_STREAM_ID)
        position = parse_position(session.session_id, cursor)
        stream = session_stream(
            session_id=session.session_id,
            position=position,
            output_only=query.get("only") == "output",
        )
        return sse_stream_response(Response(status=200), stream, f"session {pk}")


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
