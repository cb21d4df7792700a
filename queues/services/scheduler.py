"""The scheduler: pending tasks become runs, highest priority first, then oldest.

One transaction per task: claim the next eligible pending task with `FOR UPDATE SKIP
LOCKED` (`queues.locks.claim_next_pending`), so any number of workers can run batches at
once and never start a task twice; check its queue's concurrency limit; start its turn
(`queues.services.turns`); record the attempt (state `running`) and the task's latest
attempt. A worker's claims within one batch therefore come in priority order.

- Concurrency limits: `AGENTRUN_QUEUE_CONCURRENCY` maps a queue name to the most tasks it
  may have running at once; a queue not named is unlimited. Queues already at their limit
  are left out of the claim; for a limited queue the count is re-taken under that queue's
  `QUEUE_SLOTS` advisory lock, held to commit, so two workers never take its last slot.
- Sessions: a session's tasks start one at a time, oldest first, once the session has no
  active turn (the claim skips the others; a race is caught under the session lock).
- A task that cannot become a run (unknown backend, session boundary, …) gets a failed
  attempt and fails, with the error as its failure; it can be retried.

Lock order per transaction: the task row, the queue's slot lock, the session admission
lock, then the new run and its session; the task version last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from agentrun import conf
from agentrun.errors import AgentRunError
from agentrun.locks import LockKey, advisory_xact_lock
from queues.locks import claim_next_pending
from queues.models import AttemptState, QueueTask, TaskState
from queues.selectors import full_queues
from queues.services.reconcile import reconcile_projections
from queues.services.transitions import insert_attempt_locked, move_task_locked
from queues.services.turns import StartedTurn, start_task_turn_locked
from runs.models import FailureKind

STARTED = "started"
FAILED = "failed"


@dataclass
class ScheduleResult:
    """What one batch did; `started` lists task ids in the order this worker started them."""

    started: list[str] = field(default_factory=list)
    failed: int = 0
    skipped: int = 0  # left pending: the queue was full or the session busy

    def as_dict(self) -> dict[str, int]:
        return {"started": len(self.started), "failed": self.failed, "skipped": self.skipped}


def concurrency_limits() -> dict[str, int]:
    """`AGENTRUN_QUEUE_CONCURRENCY`, checked: queue name → a limit of at least 0."""
    limits = conf.queue_concurrency()
    if not isinstance(limits, Mapping) or not all(
        isinstance(k, str) and type(v) is int and v >= 0 for k, v in limits.items()
    ):
        raise ImproperlyConfigured(
            "AGENTRUN_QUEUE_CONCURRENCY must be a JSON object of queue name → integer ≥ 0"
        )
    return dict(limits)


def schedule_batch(*, limit: int) -> ScheduleResult:
    """Start up to `limit` pending tasks, one transaction each (see module doc).

    Safe on many workers at once. Side effects per started task: a run, its turn command
    and events, a dispatch intent unless the task says `"dispatch": null`, a `running`
    attempt, a new task version. Tasks left pending are not claimed again in this batch.
    """
    result = ScheduleResult()
    left: list[str] = []
    limits = concurrency_limits()
    for _ in range(limit):
        outcome = schedule_next(skip_ids=left, limits=limits)
        if outcome is None:
            break
        task_id, disposition = outcome
        if disposition == STARTED:
            result.started.append(task_id)
        elif disposition == FAILED:
            result.failed += 1
        else:
            result.skipped += 1
            left.append(task_id)
    return result


def scheduler_pass(*, limit: int) -> dict[str, int]:
    """What the beat task and `manage.py schedule_queue` run: one batch of starts, then up
    to `limit` running tasks whose run already ended are projected (the safety net)."""
    counts = schedule_batch(limit=limit).as_dict()
    return {**counts, "reconciled": reconcile_projections(limit=limit)}


def schedule_next(*, skip_ids: list[str], limits: dict[str, int]) -> tuple[str, str] | None:
    """Claim and start one task in its own transaction; None when none is eligible.
    Returns the task id and `started`, `failed`, `queue_full` or `session_busy`."""
    with transaction.atomic(durable=True):
        task = claim_next_pending(skip_ids=skip_ids, full_queues=full_queues(limits))
        if task is None:
            return None
        if not _slot_free(task, limits):
            return task.id, "queue_full"
        return task.id, _start(task)


def _slot_free(task: QueueTask, limits: dict[str, int]) -> bool:
    """Whether the task's queue has a free slot, decided under the queue's slot lock
    (held to commit, so the task this transaction starts is counted by the next one)."""
    limit = limits.get(task.queue)
    if limit is None:
        return True
    advisory_xact_lock(LockKey.QUEUE_SLOTS, task.queue)
    return QueueTask.objects.filter(queue=task.queue, state=TaskState.RUNNING).count() < limit


def _start(task: QueueTask) -> str:
    """Start the claimed task's turn; record the attempt either way. Needs the task lock."""
    try:
        with transaction.atomic():  # a savepoint: a refused start leaves no half-made run
            turn = start_task_turn_locked(task)
    except AgentRunError as error:
        if error.code == "session_busy":
            return "session_busy"
        record_start_failure_locked(task, error)
        return FAILED
    record_started_locked(task, turn)
    return STARTED


def record_started_locked(task: QueueTask, turn: StartedTurn) -> None:
    """A `running` attempt for the new run, and the task `running`. Needs the task lock."""
    attempt = insert_attempt_locked(
        task,
        state=AttemptState.RUNNING,
        run_id=turn.run.id,
        command_id=turn.command.id,
        runner_job_id=turn.runner_job_id,
        session_id=turn.run.session_id,
        activated_at=turn.run.created_at,
    )
    move_task_locked(task, state=TaskState.RUNNING, attempt=attempt)


def record_start_failure_locked(task: QueueTask, error: AgentRunError) -> None:
    """A `failed` attempt carrying the error, and the task `failed`. Needs the task lock."""
    attempt = insert_attempt_locked(
        task,
        state=AttemptState.FAILED,
        failure_kind=error.failure_kind or FailureKind.SCHEMA_INVALID,
        failure_message=error.message,
        terminal_at=timezone.now(),
    )
    move_task_locked(task, state=TaskState.FAILED, attempt=attempt)
