"""Runners and runner jobs: register (upsert), save a launched job, patch its result."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentrun.errors import conflict, not_found
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from agentrun.redaction import redact_json
from agentrun.tenancy import Scope
from runs.locks import lock_run, lock_runner_job
from runs.models import Run, Runner, RunnerJob


def register_runner(
    *,
    scope: Scope,
    runner_id: str | None,
    run_id: str | None = None,
    attempt_id: str | None = None,
    backend_profile: str | None = None,
    placement: str | None = None,
    source_commit: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Runner:
    """Register or refresh a runner (seed `registerRunner`): an upsert by id within a tenant.

    The runner belongs to its run's tenant (or the caller's). Metadata is redacted;
    `registered_at` is kept from the first registration. Locks: the runner row. Errors:
    404 a run outside `scope`; 409 `runner_id_taken` when the id is another tenant's
    runner (its record is left as it was).
    """
    now = timezone.now()
    fields = {
        "run_id": run_id,
        "attempt_id": attempt_id,
        "backend_profile": backend_profile,
        "placement": placement,
        "source_commit": source_commit,
        "metadata": redact_json(metadata or {}),
        "heartbeat_at": now,
    }
    runner_id = runner_id or new_id("runner")
    with transaction.atomic(durable=True):
        tenant_id = _tenant_of_registration(scope, run_id)
        # Insert-or-nothing, then an UPDATE guarded by the tenant: concurrent first
        # registrations of one id never both insert, and no read-then-write window opens.
        Runner.objects.bulk_create(
            [Runner(id=runner_id, tenant_id=tenant_id, registered_at=now, **fields)],
            ignore_conflicts=True,
        )
        rows = Runner.objects.filter(pk=runner_id)
        if scope.is_operator:
            rows.update(**fields, **({"tenant_id": tenant_id} if tenant_id else {}))
        elif not rows.filter(tenant_id=tenant_id).update(**fields):
            raise conflict(
                f"runner id {runner_id!r} is registered to another tenant",
                code="runner_id_taken",
            )
        return rows.get()


def _tenant_of_registration(scope: Scope, run_id: str | None) -> str | None:
    """The tenant a registration is for: its run's (which must be in scope), else the
    caller's (none for the operator)."""
    if run_id is None:
        return scope.tenant_id
    run = scope.filter(Run.objects.filter(pk=run_id), run_field="id").first()
    if run is None and not scope.is_operator:
        raise not_found("run", run_id)
    return run.tenant_id if run is not None else None


@dataclass(frozen=True)
class RunnerJobSpec:
    command_id: str
    attempt_id: str
    runner_id: str
    namespace: str
    job_name: str
    manager_url: str
    image: str
    source_commit: str
    service_account_name: str | None = None
    result: dict[str, Any] | None = None

    def payload_hash(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "result"}
        return stable_hash(fields)


@dataclass(frozen=True)
class SavedRunnerJob:
    job: RunnerJob
    created: bool


def save_runner_job(
    *,
    run_id: str,
    spec: RunnerJobSpec,
    idempotency_key: str | None = None,
    runner_job_id: str | None = None,
    payload_hash: str | None = None,
) -> SavedRunnerJob:
    """Record a launched runner job, idempotent per (run, idempotency key) (seed
    `saveRunnerJob`). `runner_job_id` and `payload_hash`: the caller's, as the seed took
    them (else a new id, and the hash of the spec).

    Locks: the run row. Errors: 404 unknown run or a command of another run; 409 when the
    key was used with a different job, or `runner_job_id_taken` when the id is another job's.
    """
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        item = NewRunnerJob(run, spec, idempotency_key, runner_job_id, payload_hash)
        existing = _existing_jobs([item])
        # A replay is answered from its key (409 if it differs) before the command is checked.
        if not existing and not run.commands.filter(pk=spec.command_id).exists():
            raise not_found("command", spec.command_id)
        try:
            with transaction.atomic():  # a savepoint: a taken id is a 409, not a 500
                return _save_locked([item], existing)[0]
        except IntegrityError as error:
            raise conflict(
                f"runner job {runner_job_id} already exists",
                code="runner_job_id_taken",
                runner_job_id=runner_job_id,
            ) from error


@dataclass(frozen=True)
class NewRunnerJob:
    run: Run
    spec: RunnerJobSpec
    idempotency_key: str | None = None
    # The id to save it under: the dispatch intent's planned id, so the id a queue attempt
    # and the intent name is the job's own (seed). None: a new id.
    runner_job_id: str | None = None
    payload_hash: str | None = None  # a caller's own hash (seed); None: the spec's


def save_runner_jobs_locked(*, jobs: list[NewRunnerJob]) -> list[SavedRunnerJob]:
    """Record several launched jobs: one read of the replays, one INSERT of the new ones.

    Needs the caller's transaction and the runs' locks, and each spec's command checked to
    be its run's (the dispatcher has locked both). Errors: 409 when an idempotency key was
    used with a different job (nothing of the batch is written: the caller rolls back).
    """
    return _save_locked(jobs, _existing_jobs(jobs))


def _save_locked(
    jobs: list[NewRunnerJob], existing: dict[tuple[str, str | None], RunnerJob]
) -> list[SavedRunnerJob]:
    now = timezone.now()
    saved: list[SavedRunnerJob] = []
    for item in jobs:
        payload_hash = item.payload_hash or item.spec.payload_hash()
        replay = existing.get((item.run.id, item.idempotency_key))
        if replay is not None:
            if replay.payload_hash != payload_hash:
                raise conflict(
                    f"runner job idempotency key {item.idempotency_key!r} was used with a "
                    "different job",
                    code="idempotency_mismatch",
                    runner_job_id=replay.id,
                )
            saved.append(SavedRunnerJob(replay, created=False))
            continue
        saved.append(SavedRunnerJob(_job_row(item, payload_hash, now), created=True))
    RunnerJob.objects.bulk_create([item.job for item in saved if item.created])
    return saved


def _existing_jobs(jobs: list[NewRunnerJob]) -> dict[tuple[str, str | None], RunnerJob]:
    keys = [item.idempotency_key for item in jobs if item.idempotency_key is not None]
    if not keys:
        return {}
    runs = {item.run.id for item in jobs}
    found = RunnerJob.objects.filter(run_id__in=runs, idempotency_key__in=keys)
    return {(job.run_id, job.idempotency_key): job for job in found}


def _job_row(item: NewRunnerJob, payload_hash: str, now: datetime) -> RunnerJob:
    # Each field of the spec is the job's column of that name; the result is kept redacted.
    columns = {**vars(item.spec), "result": redact_json(item.spec.result or {})}
    return RunnerJob(
        id=item.runner_job_id or new_id("rjob"),
        run=item.run,
        idempotency_key=item.idempotency_key,
        payload_hash=payload_hash,
        created_at=now,
        updated_at=now,
        **columns,
    )


def patch_runner_job_result(*, runner_job_id: str, patch: dict[str, Any]) -> RunnerJob:
    """Merge `patch` into a job's result (seed `updateRunnerJobResult`). Locks: the job row."""
    with transaction.atomic(durable=True):
        job = lock_runner_job(runner_job_id)
        job.result = {**job.result, **redact_json(patch)}
        job.updated_at = timezone.now()
        job.save(update_fields=["result", "updated_at"])
    return job
