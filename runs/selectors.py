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
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import JSONObject

from agentrun.errors import conflict, invalid, not_found
from agentrun.tenancy import Scope
from runs.control_models import Approval, CancelRequest
from runs.models import (
    LEASED_RUN_STATUSES,
    TERMINAL_COMMAND_STATES,
    TERMINAL_RUN_STATUSES,
    Backend,
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


def default_provider_id(backend_profile: str) -> str:
    """The provider a run gets when what it came from named none (a queue task's
    `provider_id` is optional, as in the seed): the profile's operator-set
    `capabilities.default_provider_id`, else the seed's naming,
    `agentrun-v01-provider-<profile>`."""
    backend = Backend.objects.filter(profile=backend_profile).first()
    named = (backend.capabilities or {}).get("default_provider_id") if backend else None
    return named if isinstance(named, str) and named else f"agentrun-v01-provider-{backend_profile}"


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


# What one `GET /runs` may cost, whatever the caller's history (issue 16): `total` counts
# at most TOTAL_CAP runs (then `total_truncated`), the facets describe the FACET_WINDOW
# most recently updated runs of the scope (then `facets_truncated`).
TOTAL_CAP = 10_000
FACET_WINDOW = 1_000


@dataclass(frozen=True)
class RunPage:
    items: list[Run]
    total: int
    facets: dict[str, Any]
    page: int
    page_size: int
    total_truncated: bool = False
    facets_truncated: bool = False


def _columns_json(*columns: str) -> JSONObject:
    """A row as a JSON object of these columns, each under its own name."""
    return JSONObject(**{column: column for column in columns})


# Every column of the latest command and runner job, as the seed's `row_to_json(c.*)`.
LATEST_COMMAND_COLUMNS = tuple(field.attname for field in Command._meta.concrete_fields)
LATEST_RUNNER_JOB_COLUMNS = tuple(field.attname for field in RunnerJob._meta.concrete_fields)


def _command_json() -> JSONObject:
    return _columns_json(*LATEST_COMMAND_COLUMNS)


def _runner_job_json() -> JSONObject:
    return _columns_json(*LATEST_RUNNER_JOB_COLUMNS)


def recent_runs(scope: QuerySet[Run], limit: int) -> QuerySet[Run]:
    """The `limit` most recently updated runs of `scope`: a walk of the `(tenant_id,
    -updated_at, -id)` index (or `(-updated_at, -id)` for an operator), never a sort of
    the scope's history."""
    return scope.order_by(*RUN_SORTS["updated-desc"])[:limit]


def _facets(scope: QuerySet[Run]) -> tuple[dict[str, Any], bool]:
    """Facet values over the scope's FACET_WINDOW most recent runs (not the filtered page):
    the choices a run list UI offers; and whether older runs were left out."""
    window = recent_runs(scope, FACET_WINDOW)  # aggregated as a subquery of its slice
    status_counts = {status: Count("id", filter=Q(status=status)) for status in RunStatus.values}
    facets = window.aggregate(
        projects=ArrayAgg("project_id", distinct=True, order_by="project_id", default=[]),
        workspaces=ArrayAgg(
            F("workspace_ref__path"),
            distinct=True,
            order_by=F("workspace_ref__path"),
            filter=Q(workspace_ref__path__isnull=False),
            default=[],
        ),
        backends=ArrayAgg("backend_profile", distinct=True, order_by="backend_profile", default=[]),
        providers=ArrayAgg("provider_id", distinct=True, order_by="provider_id", default=[]),
        **status_counts,
    )
    facets["status_counts"] = {status: facets.pop(status) for status in RunStatus.values}
    truncated = scope.order_by()[FACET_WINDOW : FACET_WINDOW + 1].exists()
    return facets, truncated


def list_runs(
    *, scope: QuerySet[Run], filtered: QuerySet[Run], sort: str, page: int, page_size: int
) -> RunPage:
    """A page of runs with each run's latest command and runner job (seed `listRuns`), the
    total (counted up to TOTAL_CAP) and the facets (over the FACET_WINDOW most recent runs
    of `scope`). `filtered` is `scope` narrowed by the filterset; `sort` is one of
    RUN_SORTS. Four bounded statements, none of which reads the scope's whole history."""
    offset = (page - 1) * page_size
    if offset >= TOTAL_CAP:  # a deep offset walks (and discards) that many runs
        raise invalid(
            f"page: pages reach the first {TOTAL_CAP} runs; narrow the filters", field="page"
        )
    latest_command = Command.objects.filter(run=OuterRef("pk")).order_by("-seq")
    latest_job = RunnerJob.objects.filter(run=OuterRef("pk")).order_by("-created_at", "-id")
    rows: list[Run] = list(
        filtered.annotate(
            latest_command=Subquery(latest_command.values(json=_command_json())[:1]),
            latest_runner_job=Subquery(latest_job.values(json=_runner_job_json())[:1]),
        ).order_by(*RUN_SORTS[sort])[offset : offset + page_size]
    )
    counted = filtered.order_by()[: TOTAL_CAP + 1].count()
    facets, facets_truncated = _facets(scope)
    return RunPage(
        rows,
        min(counted, TOTAL_CAP),
        facets,
        page,
        page_size,
        total_truncated=counted > TOTAL_CAP,
        facets_truncated=facets_truncated,
    )


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


def runner_jobs_for(
    *,
    run: Run,
    command_id: str | None = None,
    idempotency_key: str | None = None,
    payload_hash: str | None = None,
) -> list[RunnerJob]:
    """A run's runner jobs, oldest first; with `idempotency_key`, the one saved under it
    (409 if `payload_hash` is given and differs)."""
    if idempotency_key is not None:
        job = runner_job_by_idempotency_key(
            run=run, idempotency_key=idempotency_key, payload_hash=payload_hash
        )
        jobs_by_key = [job] if job is not None else []
        return [j for j in jobs_by_key if command_id is None or j.command_id == command_id]
    jobs = RunnerJob.objects.filter(run=run)
    if command_id:
        jobs = jobs.filter(command_id=command_id)
    return list(jobs.order_by("created_at", "id"))


def runner_job_by_idempotency_key(
    *, run: Run, idempotency_key: str, payload_hash: str | None = None
) -> RunnerJob | None:
    """The run's job saved under `idempotency_key`, or None (seed
    `getRunnerJobByIdempotencyKey`). Errors: 409 when `payload_hash` is given and differs."""
    job = RunnerJob.objects.filter(run=run, idempotency_key=idempotency_key).first()
    if job is not None and payload_hash is not None and job.payload_hash != payload_hash:
        raise conflict(
            f"runner job idempotency key {idempotency_key!r} was used with a different job",
            code="idempotency_mismatch",
            runner_job_id=job.id,
        )
    return job


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


def approvals_of(*, run: Run) -> list[Approval]:
    """A run (already read in the caller's scope)'s approvals, oldest first."""
    return list(Approval.objects.filter(run=run).order_by("created_at", "id"))


def approval_of(*, run: Run, approval_id: str) -> Approval:
    """One approval of a run already read in the caller's scope; 404 otherwise."""
    approval = Approval.objects.filter(pk=approval_id, run=run).first()
    if approval is None:
        raise not_found("approval", approval_id)
    return approval
