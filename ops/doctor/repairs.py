"""The doctor's repairs: one small service per kind of finding.

Each repair is one transaction that takes the locks of the state it repairs, in the
system's lock order (run → command → intent; run → session; run → task → attempt), checks
the finding again under them, and then moves the state through the same locked helpers the
domain services use (`release_claim_locked`, `fence_open_intents_locked`, the session and
queue projections, `fail_run_locked`, `release_outbox_record`). A finding that no longer
holds is left alone and said so, which is what makes `agentrun_doctor --fix` idempotent:
a second run finds nothing, and a repair racing a live writer never overrides it.

Each returns one sentence saying what it did.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentrun.tenancy import Scope
from dispatch.intents import fence_open_intents_locked
from dispatch.models import RunnerDispatchIntent
from outbox.services.release import release_outbox_record
from queues.locks import lock_attempt_of_run, lock_task
from queues.models import AttemptState, QueueAttempt
from queues.services.transitions import finish_attempt_locked, move_task_locked
from queues.wakeup import wake_scheduler
from runs.locks import lock_command, lock_run
from runs.models import LEASED_RUN_STATUSES, FailureKind, Lease, Run, RunStatus
from runs.phases import Phase
from runs.services.reaper import InfraFailure, fail_run_locked
from runs.services.terminal import release_claim_locked
from sessions.locks import lock_session
from sessions.models import Session
from sessions.projection import project_turn_terminal_locked

DOCTOR = "agentrun_doctor"
LEFT_ALONE = "no longer holds: left alone"


def _lock_run_if_exists(run_id: str) -> Run | None:
    return lock_run(run_id) if Run.objects.filter(pk=run_id).exists() else None


def end_session_turn(*, session_id: str) -> str:
    """A session whose active run is terminal or gone: end its turn as that run ended (a
    gone run counts as failed, `infra-failed`). Locks: the run (if any), then the session.
    """
    observed = _active_run_id(session_id)
    if observed is None:
        return LEFT_ALONE
    with transaction.atomic():
        run = _lock_run_if_exists(observed)
        session = lock_session(session_id)
        if session is None or session.active_run_id != observed:
            return LEFT_ALONE
        if run is None:
            # The projection reads only the run's id and session: a stand-in for the lost run.
            run = Run(id=observed, session_ref={"session_id": session_id})
            project_turn_terminal_locked(
                run,
                command_id=None,
                terminal_status=RunStatus.FAILED,
                failure_kind=FailureKind.INFRA_FAILED,
            )
            return f"turn ended as failed: its run {observed} is gone"
        if not run.is_terminal:
            return LEFT_ALONE
        project_turn_terminal_locked(
            run, command_id=None, terminal_status=run.status, failure_kind=run.failure_kind
        )
    return f"turn ended as {run.status}, like its run {run.id}"


def _active_run_id(session_id: str) -> str | None:
    """The session's active run id, read without a lock (the repair re-reads it locked)."""
    return Session.objects.filter(pk=session_id).values_list("active_run_id", flat=True).first()


def restore_run_lease(*, run_id: str) -> str:
    """A claimed run with no lease row: restore the row from the run's own claim (the run
    row is the authority; the reaper then fails it if the lease lapses). A claim with no
    runner or no expiry cannot be restored: the run fails `infra-failed`. Locks: the run.
    """
    with transaction.atomic():
        run = lock_run(run_id)
        live = run.status in LEASED_RUN_STATUSES
        if not live or Lease.objects.filter(run=run).exists():
            return LEFT_ALONE
        if run.claimed_by and run.lease_expires_at:
            Lease.objects.create(
                run=run,
                runner_id=run.claimed_by,
                lease_expires_at=run.lease_expires_at,
                lease_epoch=run.lease_epoch,
                updated_at=timezone.now(),
            )
            return f"lease restored from the claim of {run.claimed_by} (epoch {run.lease_epoch})"
        failure = InfraFailure(phase=Phase.CLAIM_LOST, reason="claimed with no runner and no lease")
        fail_run_locked(run, failure)
    return "failed as infra-failed: no runner held its claim"


def release_terminal_claim(*, run_id: str) -> str:
    """A lease on a terminal run: release the claim and delete the lease. Locks: the run."""
    with transaction.atomic():
        run = lock_run(run_id)
        if not run.is_terminal:
            return LEFT_ALONE
        release_claim_locked(run)
    return f"claim released (run is {run.status})"


def fence_intent(*, intent_id: str) -> str:
    """An open intent of a terminal run or command: fence it `cancelled`, as every terminal
    path does. Locks: run → command → the intents (in the fence's UPDATE)."""
    row = RunnerDispatchIntent.objects.filter(pk=intent_id).values("run_id", "command_id").first()
    if row is None:
        return LEFT_ALONE
    with transaction.atomic():
        run = lock_run(row["run_id"])
        command = lock_command(row["command_id"], run=run)
        if run.is_terminal:
            reason = f"run {run.id} is {run.status} ({DOCTOR})"
            fenced = fence_open_intents_locked(run=run, reason=reason)
        elif command.is_terminal:
            reason = f"command {command.id} is {command.state} ({DOCTOR})"
            fenced = fence_open_intents_locked(run=run, command=command, reason=reason)
        else:
            return LEFT_ALONE
    return f"fenced {fenced} open intent(s) as cancelled" if fenced else LEFT_ALONE


def reproject_task(*, task_id: str) -> str:
    """A task whose latest attempt still runs while its run ended (or is gone): finish the
    attempt as the run ended (gone: failed, `infra-failed`) and move the task with it.
    Locks: run → task → attempt. Side effect after commit: wakes the scheduler."""
    latest = QueueAttempt.objects.filter(task_id=task_id).order_by("-retry_index").first()
    if latest is None or latest.run_id is None:
        return LEFT_ALONE
    with transaction.atomic():
        run = _lock_run_if_exists(latest.run_id)
        if run is not None and not run.is_terminal:
            return LEFT_ALONE
        task = lock_task(task_id, scope=Scope.operator())
        attempt = lock_attempt_of_run(task, latest.run_id)
        if attempt is None:
            return LEFT_ALONE
        state, kind, message = _outcome_of(run, latest.run_id)
        finish_attempt_locked(attempt, state=state, failure_kind=kind, failure_message=message)
        if not task.is_terminal:
            move_task_locked(task, state=attempt.state, attempt=attempt)
        transaction.on_commit(wake_scheduler)
    return f"attempt {attempt.attempt_id} is {attempt.state}; task is {task.state}"


def _outcome_of(run: Run | None, run_id: str) -> tuple[str, str | None, str | None]:
    if run is None:
        return AttemptState.FAILED, FailureKind.INFRA_FAILED, f"its run {run_id} is gone ({DOCTOR})"
    return run.status, run.failure_kind, run.failure_message or run.cancel_reason


def release_lapsed_outbox_lease(*, record_id: str) -> str:
    """An outbox record leased long past its lease: release it (and the undelivered records
    of its key before it) for immediate retry, as the admin action does."""
    released = release_outbox_record(record_id=record_id)
    if not released.released:
        return f"{LEFT_ALONE} ({released.reason})"
    return f"released {released.released} record(s) for immediate retry"
