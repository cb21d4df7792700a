"""Task and attempt transitions shared by the scheduler, retry, cancel and the projector.

These are not services: each runs inside its caller's transaction, with the task locked
(and the attempt, where one is written). Attempts only move forward, `reserved →
running → terminal`, and a terminal attempt is never written again: every attempt write
is a compare-and-set on its state. A task change that is visible takes a new version
(`queues.versions`), allocated last, after the row locks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from agentrun.ids import new_id
from agentrun.redaction import redact_text
from queues.models import ACTIVE_ATTEMPT_STATES, AttemptState, QueueAttempt, QueueTask
from queues.versions import next_queue_version


def insert_attempt_locked(
    task: QueueTask, *, state: str, attempt_id: str | None = None, **fields: Any
) -> QueueAttempt:
    """Insert the task's next attempt (`previous_attempt_id` = the latest one), under a new
    id unless `attempt_id` names one. Needs the task lock. The database refuses a second
    active attempt and a reused retry index."""
    now = timezone.now()
    latest = QueueAttempt.objects.filter(task=task).order_by("-retry_index").first()
    values: dict[str, Any] = {
        "session_id": task.session_id,
        "session_path": task.session_path,
        **fields,
    }
    return QueueAttempt.objects.create(
        attempt_id=attempt_id or new_id("qa"),
        task=task,
        retry_index=latest.retry_index + 1 if latest else 0,
        state=state,
        payload_hash=task.payload_hash,
        previous_attempt_id=latest.attempt_id if latest else None,
        created_at=now,
        updated_at=now,
        **values,
    )


def write_attempt_locked(
    attempt: QueueAttempt, *, from_states: tuple[str, ...], **changes: Any
) -> bool:
    """Compare-and-set: apply `changes` only while the attempt is in one of `from_states`;
    True when it was. Needs the task lock. Updates `attempt` in place when it wins."""
    changes["updated_at"] = timezone.now()
    won = QueueAttempt.objects.filter(
        task_id=attempt.task_id, attempt_id=attempt.attempt_id, state__in=from_states
    ).update(**changes)
    if won:
        for name, value in changes.items():
            setattr(attempt, name, value)
    return bool(won)


def finish_attempt_locked(
    attempt: QueueAttempt,
    *,
    state: str,
    failure_kind: str | None,
    failure_message: str | None,
) -> bool:
    """Move a live attempt to its terminal state; False (nothing written) when it was
    already terminal: terminal attempts are immutable."""
    return write_attempt_locked(
        attempt,
        from_states=(*ACTIVE_ATTEMPT_STATES, AttemptState.PENDING),
        state=state,
        failure_kind=failure_kind,
        failure_message=redact_text(failure_message) if failure_message else failure_message,
        terminal_at=timezone.now(),
    )


def move_task_locked(
    task: QueueTask,
    *,
    state: str,
    attempt: QueueAttempt | None,
    cancelled_at: datetime | None = None,
    cancel_reason: str | None = None,
) -> QueueTask:
    """Set the task's state and latest-attempt projection, with a new version. Needs the
    task lock and must come after every other row lock of the transaction."""
    task.state = state
    fields = ["state", "version", "updated_at"]
    if attempt is not None:
        task.latest_attempt = attempt.as_ref()
        fields.append("latest_attempt")
    if cancelled_at is not None:
        task.cancelled_at, task.cancel_reason = cancelled_at, cancel_reason
        fields += ["cancelled_at", "cancel_reason"]
    task.updated_at = timezone.now()
    task.version = next_queue_version()
    task.save(update_fields=fields)
    return task
