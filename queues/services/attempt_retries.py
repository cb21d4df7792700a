"""Retrying a failed or blocked task: reserve, activate, record failure (seed
`reserveQueueRetryAttempt`, `activateQueueRetryAttempt`, `recordQueueRetryAttemptFailure`).

- Reserve writes a `reserved` attempt with the next retry index, a run id and a planned
  runner job id, under the task lock. Its idempotency key is unique per task: the same
  key and reason replay the reservation, another reason is a 409. A dry run answers what
  would be reserved and writes nothing. Refused (409) while an attempt is active (the
  database also enforces one active attempt per task) or unless the task is failed or
  blocked.
- Activate creates the reserved run (and its turn command and dispatch intent, or a
  session turn), moves the attempt to `running` and the task to `running` with the
  attempt as its latest. Activating an attempt that is no longer reserved replays it.
  If the run cannot be created, the error is recorded on the attempt (which stays
  reserved, so activation can be tried again) and then raised.
- Record failure stores why an activation failed on a still-reserved attempt.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from agentrun.errors import AgentRunError, conflict
from agentrun.ids import new_id
from agentrun.tenancy import Scope
from queues.locks import lock_attempt, lock_attempts, lock_task
from queues.models import (
    ACTIVE_ATTEMPT_STATES,
    RETRYABLE_TASK_STATES,
    AttemptState,
    QueueAttempt,
    QueueTask,
    TaskState,
)
from queues.services.tasks import check_task_intact
from queues.services.transitions import insert_attempt_locked, move_task_locked
from queues.services.transitions import write_attempt_locked as write_attempt
from queues.services.turns import start_task_turn_locked


@dataclass(frozen=True)
class Reservation:
    task: QueueTask
    attempt: QueueAttempt | None  # None for a dry run
    retry_index: int
    created: bool
    replayed: bool
    dry_run: bool


def reserve_retry(
    *, task_id: str, scope: Scope, idempotency_key: str, reason: str, dry_run: bool
) -> Reservation:
    """Reserve the task's next attempt (see module doc).

    Locks: the task, then all its attempts, so concurrent reserves of one task serialise
    and one key yields one attempt. Errors: 404; 409 `idempotency_mismatch`,
    `attempt_active`, `task_not_retryable`, `task_payload_mismatch`.
    """
    with transaction.atomic(durable=True):
        task = lock_task(task_id, scope=scope)
        check_task_intact(task)
        attempts = lock_attempts(task)
        existing = next((a for a in attempts if a.idempotency_key == idempotency_key), None)
        if existing is not None:
            return _replay(task, existing, reason, dry_run=dry_run)
        _check_retryable(task, attempts)
        retry_index = attempts[-1].retry_index + 1 if attempts else 0
        if dry_run:
            return Reservation(task, None, retry_index, False, False, dry_run=True)
        attempt = insert_attempt_locked(
            task,
            state=AttemptState.RESERVED,
            idempotency_key=idempotency_key,
            reason=reason,
            run_id=new_id("run"),
            runner_job_id=new_id("rjob"),
        )
        return Reservation(task, attempt, retry_index, True, False, dry_run=False)


def _replay(task: QueueTask, attempt: QueueAttempt, reason: str, *, dry_run: bool) -> Reservation:
    if attempt.reason != reason:
        raise conflict(
            f"retry idempotency key {attempt.idempotency_key!r} was used with another reason",
            code="idempotency_mismatch",
            attempt_id=attempt.attempt_id,
        )
    return Reservation(task, attempt, attempt.retry_index, False, True, dry_run=dry_run)


def _check_retryable(task: QueueTask, attempts: list[QueueAttempt]) -> None:
    active = [a for a in attempts if a.state in ACTIVE_ATTEMPT_STATES]
    if active:
        raise conflict(
            f"queue task {task.id} already has an active attempt {active[0].attempt_id}",
            code="attempt_active",
            attempt_id=active[0].attempt_id,
            attempt_state=active[0].state,
        )
    if task.state not in RETRYABLE_TASK_STATES:
        raise conflict(
            f"queue task {task.id} is {task.state}; only failed or blocked tasks are retried",
            code="task_not_retryable",
            state=task.state,
        )


@dataclass(frozen=True)
class Activation:
    task: QueueTask
    attempt: QueueAttempt
    activated: bool


def activate_retry(*, task_id: str, attempt_id: str, scope: Scope) -> Activation:
    """Start a reserved attempt: its run, turn and dispatch; attempt and task `running`.

    Locks: the task, the attempt, then the run it creates (new, so the run → task order
    holds). A failure to create the run is recorded on the attempt in this transaction,
    which commits, and raised after. Errors: 404; 409 `task_not_retryable`; those of run
    creation and session admission.
    """
    with transaction.atomic(durable=True):
        task = lock_task(task_id, scope=scope)
        attempt = lock_attempt(task, attempt_id)
        if attempt.state != AttemptState.RESERVED:
            return Activation(task, attempt, activated=False)
        _check_activatable(task)
        refusal = _start_reserved_locked(task, attempt)
    if refusal is not None:
        raise refusal
    return Activation(task, attempt, activated=True)


def _start_reserved_locked(task: QueueTask, attempt: QueueAttempt) -> AgentRunError | None:
    """Create the reserved run and move attempt and task to `running`; or record why that
    failed on the attempt and return the error. Needs the task and attempt locks."""
    try:
        with transaction.atomic():  # a savepoint: a refused start leaves no half-made run
            turn = start_task_turn_locked(task, retry_run_id=attempt.run_id)
    except AgentRunError as error:
        if error.code != "session_busy":
            _record_failure_locked(attempt, error.failure_kind, error.message)
        return error
    write_attempt(
        attempt,
        from_states=(AttemptState.RESERVED,),
        state=AttemptState.RUNNING,
        command_id=turn.command.id,
        runner_job_id=turn.runner_job_id or attempt.runner_job_id,
        session_id=turn.run.session_id,
        activated_at=turn.run.created_at,
        failure_kind=None,
        failure_message=None,
    )
    move_task_locked(task, state=TaskState.RUNNING, attempt=attempt)
    return None


def _check_activatable(task: QueueTask) -> None:
    if task.state not in RETRYABLE_TASK_STATES:
        raise conflict(
            f"queue task {task.id} is {task.state}; only failed or blocked tasks are retried",
            code="task_not_retryable",
            state=task.state,
        )


def record_attempt_failure(
    *,
    task_id: str,
    attempt_id: str,
    scope: Scope,
    failure_kind: str,
    failure_message: str,
) -> QueueAttempt:
    """Record why a reserved attempt could not be activated; it stays reserved. An attempt
    that is no longer reserved is returned unchanged. Locks: the task, then the attempt.
    Errors: 404."""
    with transaction.atomic(durable=True):
        task = lock_task(task_id, scope=scope)
        attempt = lock_attempt(task, attempt_id)
        _record_failure_locked(attempt, failure_kind, failure_message)
    return attempt


def _record_failure_locked(attempt: QueueAttempt, kind: str | None, message: str) -> None:
    write_attempt(
        attempt,
        from_states=(AttemptState.RESERVED,),
        failure_kind=kind or "schema-invalid",
        failure_message=message,
    )
