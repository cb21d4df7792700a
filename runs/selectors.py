"""Reads of the runs app.

Every read of tenant data starts from `runs_for(scope=…)`, which applies the tenant gate
(`agentrun.tenancy.Scope`): an operator sees every tenant, a client its own tenant, a
runner its one run. Anything outside the scope is a 404, never a 403 that reveals it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.postgres.aggregates import ArrayAgg
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery, Value, Window
from django.db.models.functions import JSONObject

from agentrun.errors import not_found
from agentrun.tenancy import Scope
from runs.models import (
    LEASED_RUN_STATUSES,
    TERMINAL_COMMAND_STATES,
    TERMINAL_RUN_STATUSES,
    Backend,
    CancelRequest,
    Command,
    Event,
    Run,
    RunnerJob,
    RunStatus,
)

RUN_SORTS: dict[str, tuple[str, ...]] = {
    "updated-desc": ("-updated_at", "-id"),
    "updated-asc": ("updated_at", "id"),
    "status-asc": ("status", "-updated_at", "-id"),
    "id-asc": ("id",),
}


def runs_for(*, scope: Scope) -> QuerySet[Run]:
    """The runs a scope may see."""
    return scope.filter(Run.objects.all(), run_field="pk")


def get_run_for(*, scope: Scope, run_id: str) -> Run:
    return scope.get_or_404(Run.objects.all(), run_id, kind="run", run_field="pk")


def writable_run_id(*, scope: Scope, run_id: str) -> str:
    """The run a runner-protocol write (events, claim, heartbeat, finish) may go to.

    A runner's scope names its one run, so nothing is read: the service locks the run and
    404s if it is gone. Any other scope's run is read in it (`get_run_for`). Another
    run is a 404 either way. Saves the hot runner writes a SELECT of the row they lock next.
    """
    if scope.run_id is not None:
        if scope.run_id != run_id:
            raise not_found("run", run_id)
        return run_id
    return get_run_for(scope=scope, run_id=run_id).id


def get_command_for(*, scope: Scope, command_id: str) -> Command:
    command = (
        Command.objects.select_related("run", "dispatch_intent")
        .filter(pk=command_id, run__in=runs_for(scope=scope))
        .first()
    )
    if command is None:
        raise not_found("command", command_id)
    return command


def get_runner_job_for(*, scope: Scope, runner_job_id: str) -> RunnerJob:
    job = RunnerJob.objects.filter(pk=runner_job_id, run__in=runs_for(scope=scope)).first()
    if job is None:
        raise not_found("runner job", runner_job_id)
    return job


@dataclass(frozen=True)
class RunPage:
    items: list[Run]
    total: int
    facets: dict[str, Any]
    page: int
    page_size: int


def _command_json() -> JSONObject:
    return JSONObject(
        id="id",
        seq="seq",
        type="type",
        state="state",
        idempotency_key="idempotency_key",
        created_at="created_at",
        updated_at="updated_at",
    )


def _runner_job_json() -> JSONObject:
    return JSONObject(
        id="id",
        command_id="command_id",
        runner_id="runner_id",
        namespace="namespace",
        job_name="job_name",
        image="image",
        result="result",
        created_at="created_at",
    )


def _facet_row(scope: QuerySet[Run]) -> QuerySet[Any, Any]:
    """One row of facet values over the key's whole scope (not the filtered page): the
    choices a run list UI offers."""
    status_counts = {status: Count("id", filter=Q(status=status)) for status in RunStatus.values}
    return (
        scope.order_by()
        .annotate(grouping=Value(1))
        .values("grouping")
        .annotate(
            facets=JSONObject(
                projects=ArrayAgg("project_id", distinct=True, order_by="project_id"),
                workspaces=ArrayAgg(
                    F("workspace_ref__path"),
                    distinct=True,
                    order_by=F("workspace_ref__path"),
                    filter=Q(workspace_ref__path__isnull=False),
                ),
                backends=ArrayAgg("backend_profile", distinct=True, order_by="backend_profile"),
                providers=ArrayAgg("provider_id", distinct=True, order_by="provider_id"),
                status_counts=JSONObject(**status_counts),
            )
        )
        .values("facets")
    )


def list_runs(
    *, scope: QuerySet[Run], filtered: QuerySet[Run], sort: str, page: int, page_size: int
) -> RunPage:
    """A page of runs with the total, the facets, and each run's latest command and
    runner job, in one query (seed `listRuns`). `filtered` is `scope` narrowed by the
    filterset; `sort` is one of RUN_SORTS."""
    offset = (page - 1) * page_size
    latest_command = Command.objects.filter(run=OuterRef("pk")).order_by("-seq")
    latest_job = RunnerJob.objects.filter(run=OuterRef("pk")).order_by("-created_at", "-id")
    rows: list[Any] = list(
        filtered.annotate(
            total=Window(Count("*")),
            # Uncorrelated, so PostgreSQL evaluates it once per query, not per row.
            facets=Subquery(_facet_row(scope)[:1]),
            latest_command=Subquery(latest_command.values(json=_command_json())[:1]),
            latest_runner_job=Subquery(latest_job.values(json=_runner_job_json())[:1]),
        ).order_by(*RUN_SORTS[sort])[offset : offset + page_size]
    )
    if rows:
        total, facets = rows[0].total, rows[0].facets
    else:  # a page past the end: the window saw no rows, ask for the two facts directly.
        total = filtered.count()
        facet_row = _facet_row(scope).order_by("grouping").first()
        facets = facet_row["facets"] if facet_row else None
    return RunPage(rows, total, facets or _empty_facets(), page, page_size)


def _empty_facets() -> dict[str, Any]:
    return {
        "projects": [],
        "workspaces": [],
        "backends": [],
        "providers": [],
        "status_counts": dict.fromkeys(RunStatus.values, 0),
    }


def events_page(*, run: Run, after_seq: int, limit: int) -> list[Event]:
    return list(Event.objects.filter(run=run, seq__gt=after_seq).order_by("seq")[:limit])


def count_events(*, run: Run, after_seq: int) -> int:
    return Event.objects.filter(run=run, seq__gt=after_seq).count()


def events_for_command(*, run: Run, command_id: str, limit: int) -> list[Event]:
    """Events about one command, and the run's own terminal status (seed
    `listEventsForCommand`)."""
    about_command = (
        Q(payload__command_id=command_id)
        | Q(payload__target_command_id=command_id)
        | (Q(type="terminal_status") & ~Q(payload__has_key="command_id"))
    )
    return list(Event.objects.filter(about_command, run=run).order_by("seq")[:limit])


def commands_page(*, run: Run, after_seq: int, limit: int) -> list[Command]:
    commands = Command.objects.filter(run=run, seq__gt=after_seq).select_related("dispatch_intent")
    return list(commands.order_by("seq")[:limit])


def cancel_requests_for(*, run: Run) -> list[CancelRequest]:
    return list(CancelRequest.objects.filter(run=run).order_by("created_at", "id"))


def runner_jobs_for(*, run: Run, command_id: str | None = None) -> list[RunnerJob]:
    jobs = RunnerJob.objects.filter(run=run)
    if command_id:
        jobs = jobs.filter(command_id=command_id)
    return list(jobs.order_by("created_at", "id"))


def runner_jobs_for_reconciliation(*, limit: int) -> list[RunnerJob]:
    """Jobs whose run or command is not terminal (seed `listRunnerJobsForReconciliation`;
    the foreign keys cascade, so a job cannot outlive its run or command here)."""
    open_work = ~Q(run__status__in=TERMINAL_RUN_STATUSES) | ~Q(
        command__state__in=TERMINAL_COMMAND_STATES
    )
    return list(RunnerJob.objects.filter(open_work).order_by("updated_at", "created_at")[:limit])


def backends() -> list[Backend]:
    return list(Backend.objects.order_by("profile"))


def expired_lease_run_ids(*, cutoff: datetime, limit: int) -> list[str]:
    """Claimed or running runs whose lease expired before `cutoff`, oldest first."""
    runs = Run.objects.filter(status__in=LEASED_RUN_STATUSES, lease_expires_at__lte=cutoff)
    return list(runs.order_by("lease_expires_at").values_list("id", flat=True)[:limit])
