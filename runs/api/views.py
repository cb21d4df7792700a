"""Views of the runs API: validate, call one service or selector, serialize.

Roles (SPEC §3): clients create and read their tenant's runs and commands and cancel
them; runners (keys scoped to one run) speak the lease protocol; operators may do both
for any tenant. Objects outside a key's scope are 404s, raised by the selectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentrun import api
from agentrun.auth import (
    IsAuthenticatedKey,
    IsClientOrOperator,
    IsRunnerOrOperator,
    request_key,
    unchecked_runner_key_digest,
)
from agentrun.errors import AgentRunError, invalid
from agentrun.metrics import count_tokens
from agentrun.pagination import CommandCursorQuery, PageQuery
from agentrun.schema import items_of
from agentrun.validation import validate_path_id
from runs import selectors
from runs.api import outputs as o
from runs.api import serializers as s
from runs.api.filters import RunFilter, run_filter_parameters
from runs.api.long_poll import PendingWait, events_page_data
from runs.locks import KeyDoesNotHoldRun
from runs.services import cancellation, command_lifecycle, event_log, lifecycle, runners
from runs.usage import check_tenant_quota
from runs.waiting import release_connection, wait_for_event


def _lease_write(request: Request, pk: str, body_class: type[Any]) -> tuple[str, Any]:
    """A lease-protocol write's run id (one the key may write: 404 otherwise) and its
    validated body."""
    run_id = selectors.writable_run_id(scope=api.request_scope(request), run_id=pk)
    return run_id, api.body(body_class, request)


def _cancel_reason(request: Request) -> dict[str, Any]:
    """A cancel's reason (the body's) and who asks (the key, recorded as `requested_by`).
    The object is looked up first, so one out of scope is a 404 whatever the body."""
    return {
        "reason": api.body(s.CancelIn, request).validated_data["reason"],
        "requested_by": request_key(request).id,
    }


def _receipt(outcome: cancellation.CancelOutcome) -> Response:
    return Response(o.CancelReceiptOut(outcome).data)


def _filter_params(request: Request) -> Any:
    """The run list's filter parameters; any other parameter is a 400 naming it."""
    allowed = {*RunFilter.base_filters, "page", "page_size"}
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise invalid(f"{unknown[0]}: unknown query parameter", field=unknown[0])
    # django-filter drops an empty filter; an empty timestamp or sort is a bad one, not "any".
    for field, message in _NOT_EMPTY.items():
        if request.query_params.get(field, None) == "":
            raise invalid(f"{field}: {message}", field=field)
    return request.query_params


_NOT_EMPTY = {"updated_after": "Enter a valid date/time.", "sort": "Select a valid choice."}


class RunViewSet(api.ObjectViewSet):
    # Who may write where an action also reads: POST /runs, /events, /commands, /runner-jobs.
    write_permissions: dict[str, Any] = {
        "create": IsClientOrOperator,
        "events": IsRunnerOrOperator,
        "commands": IsClientOrOperator,
        "runner_jobs": IsRunnerOrOperator,
    }

    # A runner's POST /events: its key, unchecked by `perform_authentication`, is checked in
    # the append's run lock statement (`_append_checking_key`); None on every other request.
    runner_key_digest: str | None = None

    def get_permissions(self) -> Sequence[Any]:
        if self.request.method == "POST" and self.action in self.write_permissions:
            return [IsAuthenticatedKey(), self.write_permissions[self.action]()]
        return super().get_permissions()

    def perform_authentication(self, request: Request) -> None:
        if self.action == "events" and request.method == "POST" and self._path_id_valid():
            self.runner_key_digest = unchecked_runner_key_digest(request)
        if self.runner_key_digest is None:
            super().perform_authentication(request)

    def check_permissions(self, request: Request) -> None:
        if self.runner_key_digest is None:  # else the run lock checks role and run
            super().check_permissions(request)

    def _path_id_valid(self) -> bool:
        """A bad id is a 400 only after the key's 401 (`ObjectViewSet.initial`)."""
        try:
            validate_path_id(self.kwargs.get("pk", ""))
        except AgentRunError:  # the ordinary path raises it, after authenticating
            return False
        return True

    @extend_schema(parameters=[*run_filter_parameters(), PageQuery], responses=o.RunPageOut)
    def list(self, request: Request) -> Response:
        scope = selectors.runs_for(scope=api.request_scope(request))
        paging = {
            key: request.query_params[key]
            for key in ("page", "page_size")
            if key in request.query_params
        }
        page = api.query_dict(PageQuery, paging)
        filterset = RunFilter(_filter_params(request), queryset=scope)
        if not filterset.is_valid():
            field, errors = next(iter(filterset.errors.items()))
            raise invalid(f"{field}: {errors[0]}", field=field, errors=filterset.errors)
        result = selectors.list_runs(
            scope=scope,
            filtered=filterset.qs,
            sort=filterset.form.cleaned_data.get("sort") or "updated-desc",
            **page,
        )
        return Response(o.RunPageOut(result).data)

    @extend_schema(request=s.RunCreateIn, responses={201: o.RunOut, 200: o.RunOut})
    def create(self, request: Request) -> Response:
        body = api.body(s.RunCreateIn, request)
        api_key = request_key(request)
        tenant_id = api.tenant_for_write(api_key, body.validated_data.get("tenant_id"))
        result = lifecycle.create_run(
            tenant_id=tenant_id, spec=body.spec(), run_id=body.validated_data.get("id")
        )
        return api.created_or_replayed(result.run, o.RunOut, result.created)

    @extend_schema(responses=o.RunOut)
    def retrieve(self, request: Request, pk: str) -> Response:
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        return Response(o.RunOut(run).data)

    @extend_schema(request=s.CancelIn, responses=o.CancelReceiptOut)
    @action(detail=True, methods=["post"], permission_classes=[IsClientOrOperator])
    def cancel(self, request: Request, pk: str) -> Response:
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        return _receipt(cancellation.cancel_run(run_id=run.id, **_cancel_reason(request)))

    @extend_schema(responses=items_of(o.CancelRequestOut))
    @action(detail=True, methods=["get"], url_path="cancel-requests")
    def cancel_requests(self, request: Request, pk: str) -> Response:
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        items = selectors.cancel_requests_for(run=run)
        return Response({"items": o.CancelRequestOut(items, many=True).data})

    @extend_schema(methods=["GET"], parameters=[s.EventsQuery], responses=o.EventPageOut)
    @extend_schema(methods=["POST"], request=s.EventAppendIn, responses={201: items_of(o.EventOut)})
    @action(detail=True, methods=["get", "post"])
    def events(self, request: Request, pk: str) -> Response:
        if request.method == "POST":
            if self.runner_key_digest is not None:
                return self._append_checking_key(request, pk)
            run_id = selectors.writable_run_id(scope=api.request_scope(request), run_id=pk)
            return self._append_events(api.body(s.EventAppendIn, request), run_id)
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        query = api.query(s.EventsQuery, request)
        data = events_page_data(run, query)
        if data["items"] or query["wait"] <= 0:
            return Response(data)
        if getattr(request, "agentrun_async_wait", False) and release_connection():
            # Under ASGI: `run_events` awaits the append on the event loop, then re-reads;
            # this page (timed out, empty) is the answer if nothing comes.
            response = Response({**data, "timed_out": True})
            response.pending_wait = PendingWait(run, query)  # type: ignore[attr-defined]
            return response
        # Sleeps without this thread's database connection; the page query reconnects.
        if wait_for_event(run_id=run.id, after_seq=query["after_seq"], timeout_s=query["wait"]):
            return Response(events_page_data(run, query))
        return Response({**data, "timed_out": True})

    def _append_checking_key(self, request: Request, pk: str) -> Response:
        """The runner append, one round trip shorter: no key lookup before it. What the key
        lookup would have refused first is answered as the ordinary path answers it: a bad
        body, after authenticating (401, 403) and the scope (404); a key that does not hold
        the run (nothing was written), by the ordinary path from the start."""
        try:
            body = api.body(s.EventAppendIn, request)
        except Exception:
            self._authenticated_run_id(request, pk)
            raise
        try:
            return self._append_events(body, pk, runner_key_digest=self.runner_key_digest)
        except KeyDoesNotHoldRun:
            run_id = self._authenticated_run_id(request, pk)
            return self._append_events(body, run_id)

    def _authenticated_run_id(self, request: Request, pk: str) -> str:
        """Authenticate and check permissions the ordinary way, then the run's scope."""
        self.runner_key_digest = None
        super().perform_authentication(request)
        super().check_permissions(request)
        return selectors.writable_run_id(scope=api.request_scope(request), run_id=pk)

    def _append_events(
        self, body: Any, run_id: str, runner_key_digest: str | None = None
    ) -> Response:
        appended = event_log.append_runner_events(
            run_id=run_id,
            runner_id=body.validated_data["runner_id"],
            lease_epoch=body.validated_data["lease_epoch"],
            events=body.new_events(),
            runner_key_digest=runner_key_digest,
        )
        if appended:
            usage_events = (e.payload for e in appended if e.type == "token_usage")
            count_tokens(appended[0].run.backend_profile, usage_events)
        items = o.appended_events_out(appended)
        return Response({"items": items}, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[s.CountQuery], responses=o.CountOut)
    @action(detail=True, methods=["get"], url_path="events/count")
    def events_count(self, request: Request, pk: str) -> Response:
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        query = api.query(s.CountQuery, request)
        return Response({"count": selectors.count_events(run=run, after_seq=query["after_seq"])})

    @extend_schema(
        methods=["GET"], parameters=[CommandCursorQuery], responses=items_of(o.CommandOut)
    )
    @extend_schema(methods=["POST"], request=s.CommandCreateIn, responses={201: o.CommandOut})
    @action(detail=True, methods=["get", "post"], url_path="commands")
    def commands(self, request: Request, pk: str) -> Response:
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        if request.method == "GET":
            query = api.query(CommandCursorQuery, request)
            items = selectors.commands_page(run=run, **query)
            return Response({"items": o.CommandOut(items, many=True).data})
        body = api.body(s.CommandCreateIn, request)
        if body.validated_data["type"] == "turn":
            check_tenant_quota(tenant_id=run.tenant_id)  # 429 `quota_exceeded`
        result = command_lifecycle.create_command(run_id=run.id, **body.validated_data)
        return api.created_or_replayed(result.command, o.CommandOut, result.created)

    @extend_schema(request=s.ClaimIn, responses=o.RunOut)
    @action(detail=True, methods=["post"], permission_classes=[IsRunnerOrOperator])
    def claim(self, request: Request, pk: str) -> Response:
        run_id, body = _lease_write(request, pk, s.ClaimIn)
        return Response(o.RunOut(lifecycle.claim_run(run_id=run_id, **body.validated_data)).data)

    @extend_schema(request=s.HeartbeatIn, responses=o.RunOut)
    @action(detail=True, methods=["post"], permission_classes=[IsRunnerOrOperator])
    def heartbeat(self, request: Request, pk: str) -> Response:
        run_id, body = _lease_write(request, pk, s.HeartbeatIn)
        current = lifecycle.heartbeat_run(run_id=run_id, **body.validated_data)
        return Response(o.RunOut(current).data)

    @extend_schema(request=s.FinishIn, responses=o.RunOut)
    @action(detail=True, methods=["post"], permission_classes=[IsRunnerOrOperator])
    def finish(self, request: Request, pk: str) -> Response:
        run_id, body = _lease_write(request, pk, s.FinishIn)
        finished = lifecycle.finish_run(run_id=run_id, result=body.result(), **body.fence())
        return Response(o.RunOut(finished).data)

    @extend_schema(
        methods=["GET"], parameters=[s.RunnerJobsQuery], responses=items_of(o.RunnerJobOut)
    )
    @extend_schema(methods=["POST"], request=s.RunnerJobIn, responses={201: o.RunnerJobOut})
    @action(detail=True, methods=["get", "post"], url_path="runner-jobs")
    def runner_jobs(self, request: Request, pk: str) -> Response:
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        if request.method == "GET":
            query = api.query(s.RunnerJobsQuery, request)
            items = selectors.runner_jobs_for(run=run, **query)
            operator = {"operator": request_key(request).is_operator}
            return Response({"items": o.RunnerJobOut(items, many=True, context=operator).data})
        data = dict(api.body(s.RunnerJobIn, request).validated_data)
        result = runners.save_runner_job(
            run_id=run.id,
            idempotency_key=data.pop("idempotency_key", None),
            runner_job_id=data.pop("id", None),
            payload_hash=data.pop("payload_hash", None),
            spec=runners.RunnerJobSpec(**data),
        )
        return api.created_or_replayed(result.job, o.RunnerJobOut, result.created)


class CommandViewSet(api.ObjectViewSet):
    @extend_schema(request=s.RunnerWriteIn, responses=o.CommandOut)
    @action(detail=True, methods=["post"], permission_classes=[IsRunnerOrOperator])
    def ack(self, request: Request, pk: str) -> Response:
        command = selectors.get_command_for(scope=api.request_scope(request), command_id=pk)
        body = api.body(s.RunnerWriteIn, request)
        acked = command_lifecycle.ack_command(command_id=command.id, **body.validated_data)
        return Response(o.CommandOut(acked).data)

    @extend_schema(request=s.FinishIn, responses=o.CommandOut)
    @action(detail=True, methods=["post"], permission_classes=[IsRunnerOrOperator])
    def finish(self, request: Request, pk: str) -> Response:
        command = selectors.get_command_for(scope=api.request_scope(request), command_id=pk)
        body = api.body(s.FinishIn, request)
        finished = command_lifecycle.finish_command(
            command_id=command.id, result=body.result(), **body.fence()
        )
        return Response(o.CommandOut(finished).data)

    @extend_schema(request=s.CancelIn, responses=o.CancelReceiptOut)
    @action(detail=True, methods=["post"], permission_classes=[IsClientOrOperator])
    def cancel(self, request: Request, pk: str) -> Response:
        command = selectors.get_command_for(scope=api.request_scope(request), command_id=pk)
        outcome = cancellation.cancel_command(command_id=command.id, **_cancel_reason(request))
        return _receipt(outcome)

    @extend_schema(parameters=[s.CommandEventsQuery], responses=items_of(o.EventOut))
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str) -> Response:
        command = selectors.get_command_for(scope=api.request_scope(request), command_id=pk)
        query = api.query(s.CommandEventsQuery, request)
        items = selectors.events_for_command(
            run=command.run, command_id=command.id, limit=query["limit"]
        )
        return Response({"items": o.EventOut(items, many=True).data})

    @extend_schema(responses=o.CommandOut)
    def retrieve(self, request: Request, pk: str) -> Response:
        command = selectors.get_command_for(scope=api.request_scope(request), command_id=pk)
        return Response(o.CommandOut(command).data)


class RunnerJobViewSet(api.ObjectViewSet):
    permission_classes = [IsRunnerOrOperator]

    @extend_schema(request=s.RunnerJobPatchIn, responses=o.RunnerJobOut)
    def partial_update(self, request: Request, pk: str) -> Response:
        job = selectors.get_runner_job_for(scope=api.request_scope(request), runner_job_id=pk)
        body = api.body(s.RunnerJobPatchIn, request)
        patched = runners.patch_runner_job_result(
            runner_job_id=job.id, patch=body.validated_data["result"]
        )
        return Response(o.RunnerJobOut(patched).data)


class RunnerViewSet(viewsets.ViewSet):
    permission_classes = [IsRunnerOrOperator]

    @extend_schema(request=s.RunnerRegisterIn, responses={200: o.RunnerOut})
    def create(self, request: Request) -> Response:
        data = dict(api.body(s.RunnerRegisterIn, request).validated_data)
        api_key = request_key(request)
        if api_key.is_runner:
            # A runner key registers runners for its own run only.
            data["run_id"] = api_key.run_id
        runner = runners.register_runner(
            scope=api.request_scope(request), runner_id=data.pop("id", None), **data
        )
        return Response(o.RunnerOut(runner).data, status=status.HTTP_200_OK)


class BackendViewSet(viewsets.ViewSet):
    @extend_schema(responses=items_of(o.BackendOut))
    def list(self, request: Request) -> Response:
        return Response({"items": o.BackendOut(selectors.backends(), many=True).data})
