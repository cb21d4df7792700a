"""The projector: a task's run ends, so do its attempt and (if it is the latest) the task
(seed `updateQueueTaskAttempt` / `upsertQueueAttemptProjection`).

This is the queues module of the projection tier (SPEC §9.1): functions the `runs`
services call inside the run's transaction, in lock order (run → commands → session →
queue → key lock), each named `*_locked`. A projection module imports only the models,
locks and versions of `runs` and of its own app, plus `agentrun`
(`tests/test_projection_layers.py`).

The runs services call in here from inside their own transactions, holding the run lock:
`on_run_terminal_locked` at the end of `terminalize_run_locked` (every run terminal path
goes through it) and `on_command_cancelled_locked` when `cancel_command` cancels a turn
command. A run names its task in `trace_sink.task_id` (a queued session turn is found
through its attempt instead, see `queues.selectors.task_id_of`); the projector then locks the task
and the attempt that ran this run (run → task → attempt, the queue's lock order) and moves
both to the run's outcome: `completed`, `failed`, `blocked` or `cancelled`, with the run's
failure kind and message. A terminal attempt is immutable, so a second report changes
nothing; an attempt that is no longer the task's latest does not move the task.

`queues.services.reconcile` is the safety net for runs that ended without reaching the
projector.

`task_id_of` is the queues selector, named in `__all__` here because `runs` may read
from queues only through this module (its admin links a run to its task).
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from queues.locks import lock_attempt_of_run, lock_task_if_exists
from queues.models import AttemptState
from queues.selectors import sink_task_id, task_and_queued_turns_of, task_id_of
from queues.services.transitions import finish_attempt_locked, move_task_locked
from queues.wakeup import wake_scheduler
from runs.models import TERMINAL_RUN_STATUSES, Command, FailureKind, Run, RunStatus

__all__ = [
    "on_command_cancelled_locked",
    "on_run_terminal_locked",
    "project_outcome_locked",
    "task_id_of",
]


def on_run_terminal_locked(run: Run, *, read: tuple[str | None, bool] | None = None) -> None:
    """Project a terminal run onto its task and attempt. Needs the run lock; takes the task
    and attempt locks and a task version. After commit, wakes the scheduler when the run
    freed a queue slot or its session has queued turns waiting. `read`: the task of the
    run's first attempt and whether its session has queued turns, when the caller read
    them already (`runs.sql.end_run` does, in the statement that ends the run)."""
    # One read for both (it was two). `queued` is read before the projection now: that can
    # only add a wake-up (a projected task is running, never one of the pending turns).
    if read is None:
        task_id, queued = task_and_queued_turns_of(run)
    else:  # as `task_and_queued_turns_of` decides: a run without a session has no attempt
        attempt = read[0] if run.session_id is not None else None
        task_id, queued = sink_task_id(run) or attempt, read[1]
    if task_id is not None:
        project_outcome_locked(
            task_id,
            run_id=run.id,
            state=run.status,
            failure_kind=run.failure_kind,
            failure_message=run.failure_message or run.cancel_reason,
        )
    if task_id is not None or queued:
        transaction.on_commit(wake_scheduler)


def on_command_cancelled_locked(run: Run, command: Command) -> None:
    """A task's turn command was cancelled on its own: its attempt and task are
    cancelled. Needs the run lock (and the command's)."""
    task_id = task_id_of(run)
    if task_id is None or command.type != "turn":
        return
    project_outcome_locked(
        task_id,
        run_id=run.id,
        command_id=command.id,
        state=AttemptState.CANCELLED,
        failure_kind=FailureKind.CANCELLED,
        failure_message=command.cancel_reason,
    )
    transaction.on_commit(wake_scheduler)


def project_outcome_locked(
    task_id: str,
    *,
    run_id: str,
    state: str,
    failure_kind: str | None,
    failure_message: str | None,
    command_id: str | None = None,
) -> bool:
    """Move the attempt that ran `run_id` (and `command_id`, if given) to `state`, and the
    task too when that attempt is its latest. Needs the run lock; locks task, attempt.
    Returns whether anything changed."""
    if state not in TERMINAL_RUN_STATUSES:
        return False
    task = lock_task_if_exists(task_id)
    attempt = lock_attempt_of_run(task, run_id) if task is not None else None
    if task is None or attempt is None:
        return False
    if command_id is not None and attempt.command_id != command_id:
        return False
    if not finish_attempt_locked(
        attempt, state=state, failure_kind=failure_kind, failure_message=failure_message
    ):
        return False  # already terminal: immutable
    latest = (task.latest_attempt or {}).get("attempt_id")
    if task.is_terminal or latest != attempt.attempt_id:
        return True
    cancelled = state == RunStatus.CANCELLED
    move_task_locked(
        task,
        state=state,
        attempt=attempt,
        cancelled_at=timezone.now() if cancelled else None,
        cancel_reason=failure_message if cancelled else None,
    )
    return True
