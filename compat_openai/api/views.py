"""Views of `/openai/v1/agents/sessions…`: validate, call one service or selector, answer in
the SDK's shapes. Client keys act in their own tenant; an operator key reads every tenant
and names the tenant it writes in with the `OpenAI-Organization` header (the SDK's
`organization=`). The project of a new session is the `OpenAI-Project` header (the SDK's
`project=`), `default` without one. Left out of agentrun's OpenAPI document: the SDK's
own types are this surface's reference (SPEC §9.6).
"""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api
from agentrun.auth import IsClientOrOperator, request_key
from agentrun.errors import invalid
from agentrun.validation import validate_path_id
from compat_openai import selectors, shapes, stream
from compat_openai.api import inputs
from compat_openai.api.errors import sdk_exception_handler
from compat_openai.services import events, sessions
from runs.api.stream_views import StreamNegotiation, sse_stream_response

DEFAULT_PROJECT = "default"


class AgentsView(APIView):
    permission_classes = [IsClientOrOperator]
    schema = None  # not part of /api/schema (the SDK's types document it)

    def get_exception_handler(self) -> Any:
        return sdk_exception_handler

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        for name in ("session_id", "turn_id"):
            if name in kwargs:
                validate_path_id(kwargs[name], field=name)


def _header_id(request: Request, name: str) -> str | None:
    value = request.headers.get(name)
    return None if value is None else validate_path_id(value, field=name, reserved=True)


def _page(found: tuple[list[dict[str, Any]], bool]) -> Response:
    data, more = found
    return Response(shapes.page_of(data, has_more=more))


def _list_query(request: Request) -> tuple[dict[str, Any], dict[str, str]]:
    """The list query, with `metadata[key]=value` filters taken apart (the SDK's spelling)."""
    params = request.query_params.dict()
    metadata = {k[9:-1]: v for k, v in params.items() if k.startswith("metadata[") and k[-1] == "]"}
    rest = {k: v for k, v in params.items() if not (k.startswith("metadata[") and k[-1] == "]")}
    query = api.query_dict(inputs.SessionListQuery, rest)
    if len(metadata) > inputs.METADATA_PAIRS:
        raise invalid(f"metadata: at most {inputs.METADATA_PAIRS} pairs", field="metadata")
    return query, metadata


class SessionsView(AgentsView):
    def post(self, request: Request) -> Response:
        data = api.body(inputs.SessionCreateIn, request).validated_data
        key = request_key(request)
        tenant_id = api.tenant_for_write(key, _header_id(request, "OpenAI-Organization"))
        # The initial input is checked before anything is written (a bad one creates nothing).
        actions = (
            inputs.parse_events(
                [{"type": "agent.session.input.message", "input": _initial(data["input"])}]
            )
            if data.get("input")
            else []
        )
        profile = sessions.create_session(
            new=sessions.NewSession(
                tenant_id=tenant_id,
                project_id=_header_id(request, "OpenAI-Project") or DEFAULT_PROJECT,
                agent=dict(data.get("agent") or {}),
                environment=dict(data["environment"]),
                metadata=data.get("metadata") or {},
                review=data["review"],
                prompt_cache_options=data.get("prompt_cache_options"),
                execution_policy=data.get("execution_policy"),
            )
        )
        scope = api.request_scope(request)
        if actions:
            events.submit_events(
                session_id=profile.pk,
                scope=scope,
                actions=actions,
                idempotency_key=None,
                requested_by=key.id,
            )
        return Response(selectors.get_session(scope=scope, session_id=profile.pk))

    def get(self, request: Request) -> Response:
        query, metadata = _list_query(request)
        return _page(
            selectors.list_sessions(
                scope=api.request_scope(request),
                after=query.get("after"),
                limit=query["limit"],
                order=query["order"],
                metadata=metadata,
                agent_id=query.get("agent_id"),
            )
        )


def _initial(value: Any) -> Any:
    """`input` of a create: a string is one user message (the SDK's shorthand)."""
    if isinstance(value, str):
        return [{"role": "user", "content": [{"type": "input_text", "text": value}]}]
    return value


class SessionView(AgentsView):
    def get(self, request: Request, session_id: str) -> Response:
        return Response(
            selectors.get_session(scope=api.request_scope(request), session_id=session_id)
        )

    def post(self, request: Request, session_id: str) -> Response:
        changes = dict(api.body(inputs.SessionUpdateIn, request).validated_data)
        scope = api.request_scope(request)
        sessions.update_session(session_id=session_id, scope=scope, changes=changes)
        return Response(selectors.get_session(scope=scope, session_id=session_id))

    def delete(self, request: Request, session_id: str) -> Response:
        sessions.delete_session(session_id=session_id, scope=api.request_scope(request))
        return Response({"id": session_id, "object": "agent.session.deleted", "deleted": True})


class EventsView(AgentsView):
    """POST submits input events; GET is `events.stream` (served on the event loop by
    `runs.api.stream_views.sse_route`, which the route wraps this view in)."""

    content_negotiation_class = StreamNegotiation  # SSE or JSON, whatever Accept says

    def get(self, request: Request, session_id: str) -> Response:
        api.query(inputs.StreamQuery, request)  # include_obfuscation: accepted, no padding
        selectors.live_profile(session_id=session_id, scope=api.request_scope(request))
        position, seen_id, seen_index = stream.resume_point(
            session_id, request.headers.get("Last-Event-ID")
        )
        events = stream.sdk_stream(
            session_id=session_id, position=position, seen_id=seen_id, seen_index=seen_index
        )
        return sse_stream_response(Response(status=200), events, f"agents session {session_id}")

    def post(self, request: Request, session_id: str) -> Response:
        raw = api.body(inputs.EventsIn, request).validated_data["events"]
        actions = inputs.parse_events(raw)
        receipts = events.submit_events(
            session_id=session_id,
            scope=api.request_scope(request),
            actions=actions,
            idempotency_key=request.headers.get("Idempotency-Key"),
            requested_by=request_key(request).id,
        )
        body = {
            "object": "agent.session.events.receipt",
            "session_id": session_id,
            "events": [receipt.__dict__ for receipt in receipts],
        }
        return Response(body, status=status.HTTP_202_ACCEPTED)


class ItemsView(AgentsView):
    def get(self, request: Request, session_id: str) -> Response:
        query = {"after": None, **api.query(inputs.CursorQuery, request)}
        return _page(
            selectors.list_items(scope=api.request_scope(request), session_id=session_id, **query)
        )


class TurnsView(AgentsView):
    def get(self, request: Request, session_id: str) -> Response:
        query = {"after": None, **api.query(inputs.CursorQuery, request)}
        return _page(
            selectors.list_turns(scope=api.request_scope(request), session_id=session_id, **query)
        )


class TurnView(AgentsView):
    def get(self, request: Request, session_id: str, turn_id: str) -> Response:
        return Response(
            selectors.get_turn(
                scope=api.request_scope(request), session_id=session_id, turn_id=turn_id
            )
        )


class TurnItemsView(AgentsView):
    def get(self, request: Request, session_id: str, turn_id: str) -> Response:
        query = {"after": None, **api.query(inputs.TurnItemsQuery, request)}
        return _page(
            selectors.list_turn_items(
                scope=api.request_scope(request), session_id=session_id, turn_id=turn_id, **query
            )
        )
