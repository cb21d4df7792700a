"""Views of the sessions API (SPEC §3): validate, call one service or selector, serialize.

Sessions are a client's (and an operator's) surface; runner keys have no business here.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentrun import api
from agentrun.auth import IsClientOrOperator, request_key
from runs import usage
from runs.api.outputs import CommandOut
from runs.api.usage import UsageOut
from sessions import selectors
from sessions.api import serializers as s
from sessions.services import admission, lifecycle, steering
from sessions.turns import TurnRequest


def _event_page(session_id: str, run_id: str | None, items: list[Any], after: int) -> Response:
    data = {
        "session_id": session_id,
        "run_id": run_id,
        "items": items,
        "count": len(items),
        "next_after_seq": items[-1].seq if items else after,
    }
    return Response(s.SessionEventPageOut(data).data)


class SessionViewSet(api.ObjectViewSet):
    permission_classes = [IsClientOrOperator]
    reserved_pk = True  # `PUT /sessions/{id}` and a turn on a free id create the session

    @extend_schema(parameters=[s.SessionListQuery], responses=s.SessionPageOut)
    def list(self, request: Request) -> Response:
        query = api.query(s.SessionListQuery, request)
        page = selectors.list_sessions(
            scope=selectors.sessions_for(scope=api.request_scope(request)),
            state=query["state"],
            backend_profile=query.get("backend_profile"),
            reader_id=query.get("reader_id"),
            cursor=query.get("cursor"),
            limit=query["limit"],
        )
        return Response(s.SessionPageOut(page).data)

    @extend_schema(parameters=[s.ReaderQuery], responses=s.SessionOut)
    def retrieve(self, request: Request, pk: str) -> Response:
        query = api.query(s.ReaderQuery, request)
        session = selectors.get_session_for(scope=api.request_scope(request), session_id=pk)
        summary = selectors.session_summary(session=session, reader_id=query.get("reader_id"))
        return Response(s.SessionOut(summary).data)

    @extend_schema(request=s.SessionUpsertIn, responses=s.SessionOut)
    def update(self, request: Request, pk: str) -> Response:
        body = api.body(s.SessionUpsertIn, request)
        tenant_id = api.tenant_for_write(request_key(request), body.validated_data.get("tenant_id"))
        session = lifecycle.upsert_session(
            session_id=pk, tenant_id=tenant_id, fields=body.fields_value()
        )
        return Response(s.SessionOut(session).data)

    @extend_schema(
        request=s.TurnIn, responses={201: s.AdmissionOut, 200: s.AdmissionOut, 202: s.AdmissionOut}
    )
    @action(detail=True, methods=["post"])
    def turns(self, request: Request, pk: str) -> Response:
        body = api.body(s.TurnIn, request)
        api_key = request_key(request)
        data = body.validated_data
        tenant_id = api.tenant_for_write(api_key, data.get("tenant_id"))
        usage.check_tenant_quota(
            tenant_id=tenant_id
        )  # 429 `quota_exceeded` past the tenant's quota
        result = admission.admit_turn(
            request=TurnRequest(
                session_id=pk,
                tenant_id=tenant_id,
                spec=body.spec(pk),
                payload=data["command"]["payload"],
                run_id=data["run"].get("id"),
                idempotency_key=data["command"].get("idempotency_key"),
                dispatch=data["command"].get("dispatch"),
                when_busy=data["when_busy"],
                expected_turn_id=data.get("expected_turn_id"),
                requested_by=api_key.id,
            )
        )
        code = (
            status.HTTP_201_CREATED
            if result.created
            else status.HTTP_202_ACCEPTED
            if result.disposition == "queued"
            else status.HTTP_200_OK
        )
        return Response(s.AdmissionOut(result).data, status=code)

    @extend_schema(request=s.SteerIn, responses={201: CommandOut, 200: CommandOut})
    @action(detail=True, methods=["post"])
    def steer(self, request: Request, pk: str) -> Response:
        data = api.body(s.SteerIn, request).validated_data
        result = steering.admit_steer(session_id=pk, scope=api.request_scope(request), **data)
        return api.created_or_replayed(result.command, CommandOut, result.created)

    @extend_schema(request=s.SessionCancelIn, responses=s.SessionCancelOut)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        arguments = api.cancel_arguments(s.SessionCancelIn, request)
        outcome = steering.cancel_session(session_id=pk, **arguments)
        receipt = {
            "changed": bool(outcome and outcome.changed),
            "cancel_request": outcome.cancel_request if outcome else None,
            "run": outcome.run if outcome else None,
        }
        return Response(s.SessionCancelOut(receipt).data)

    @extend_schema(parameters=[s.SessionEventsQuery], responses=s.SessionEventPageOut)
    @action(detail=True, methods=["get"], url_path="trace", url_name="trace")
    def trace_events(self, request: Request, pk: str) -> Response:
        # Not named `trace`: DRF dispatches an HTTP method to the view method of that name,
        # so a `trace` action answered TRACE requests on every sessions route (a 500 on the
        # list; tests/fuzz found it).
        return self._events(request, pk, output_only=False)

    @extend_schema(parameters=[s.SessionEventsQuery], responses=s.SessionEventPageOut)
    @action(detail=True, methods=["get"])
    def output(self, request: Request, pk: str) -> Response:
        return self._events(request, pk, output_only=True)

    def _events(self, request: Request, pk: str, *, output_only: bool) -> Response:
        query = api.query(s.SessionEventsQuery, request)
        session = selectors.get_session_for(scope=api.request_scope(request), session_id=pk)
        run_id = selectors.resolve_session_run(session=session, run_id=query.get("run_id"))
        items = selectors.session_events(
            run_id=run_id,
            after_seq=query["after_seq"],
            limit=query["limit"],
            output_only=output_only,
        )
        return _event_page(pk, run_id, items, query["after_seq"])

    @extend_schema(responses=UsageOut)
    @action(detail=True, methods=["get"])
    def usage(self, request: Request, pk: str) -> Response:
        session = selectors.get_session_for(scope=api.request_scope(request), session_id=pk)
        found = usage.runs_usage(runs=selectors.session_runs(session=session))
        return Response({"session_id": session.session_id, **UsageOut(found).data})

    @extend_schema(request=s.ReadIn, responses=s.ReadCursorOut)
    @action(detail=True, methods=["post"])
    def read(self, request: Request, pk: str) -> Response:
        data = api.body(s.ReadIn, request).validated_data
        cursor = lifecycle.mark_session_read(
            session_id=pk, scope=api.request_scope(request), **data
        )
        return Response(s.ReadCursorOut(cursor).data)

    @extend_schema(request=s.StorageIn, responses=s.SessionOut)
    @action(detail=True, methods=["put"])
    def storage(self, request: Request, pk: str) -> Response:
        facts = api.body(s.StorageIn, request).facts()
        session = lifecycle.refresh_session_storage(
            session_id=pk, scope=api.request_scope(request), facts=facts
        )
        return Response(s.SessionOut(session).data)

    @extend_schema(request=None, responses=s.SessionOut)
    @action(detail=True, methods=["post"], url_path="storage/evict")
    def evict(self, request: Request, pk: str) -> Response:
        session = lifecycle.mark_session_storage_evicted(
            session_id=pk, scope=api.request_scope(request)
        )
        return Response(s.SessionOut(session).data)
