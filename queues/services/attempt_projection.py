"""Pushing a task's attempt projection from outside the scheduler (seed
`updateQueueTaskAttempt` with `upsertQueueAttemptProjection`): an operator's tool — or an
older manager sharing the database — reports an attempt's state and what it led to.

The attempt named by `attempt_id` is updated while it is live, inserted as the task's next
attempt when it is new, and left alone when it is terminal and the report says the same
(a different report of a terminal attempt is a 409: terminal attempts are immutable).
The task takes the reported state and the attempt as its `latest_attempt`, with a new
version. Operator only (`queues.api.views`): a client could otherwise point its task's
attempt at another tenant's run, which is how a queued session turn's run finds its task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentrun.errors import conflict
from agentrun.redaction import redact_text
from agentrun.tenancy import Scope
from queues.locks import lock_attempts, lock_task
from queues.models import ATTEMPT_OUTCOME_FIELDS, TERMINAL_STATES, QueueAttempt, QueueTask
from queues.services.transitions import insert_attempt_locked, move_task_locked


@dataclass(frozen=True)
class AttemptReport:
    """What the reporter says of one attempt: its id, state and outcome fields."""

    attempt_id: str
    state: str
    outcome: dict[str, Any]  # a subset of ATTEMPT_OUTCOME_FIELDS; absent ones become null


def update_task_attempt(
    *, task_id: str, scope: Scope, state: str, report: AttemptReport, session_path: str | None
) -> QueueTask:
    """Apply `report` to its attempt and the task (see module doc).

    Locks: the task, then its attempts. Errors: 404 unknown task; 409 `task_terminal` when
    the task already ended, `attempt_immutable` when a terminal attempt is reported
    differently, `attempt_active` when another attempt of the task is still active.
    """
    with transaction.atomic(durable=True):
        task = lock_task(task_id, scope=scope)
        if task.is_terminal:
            raise conflict(f"queue task {task_id} is already {task.state}", code="task_terminal")
        attempt = _upsert_locked(task, report)
        task.session_path = session_path
        task.save(update_fields=["session_path"])
        return move_task_locked(task, state=state, attempt=attempt)


def _upsert_locked(task: QueueTask, report: AttemptReport) -> QueueAttempt:
    now = timezone.now()
    outcome = {name: report.outcome.get(name) for name in ATTEMPT_OUTCOME_FIELDS}
    if outcome["failure_message"]:
        outcome["failure_message"] = redact_text(outcome["failure_message"])
    terminal_at = now if report.state in TERMINAL_STATES else None
    existing = {a.attempt_id: a for a in lock_attempts(task)}.get(report.attempt_id)
    if existing is None:
        try:
            with transaction.atomic():  # a savepoint: a second active attempt is a 409
                return insert_attempt_locked(
                    task,
                    state=report.state,
                    attempt_id=report.attempt_id,
                    activated_at=now,
                    terminal_at=terminal_at,
                    **outcome,
                )
        except IntegrityError as error:
            raise conflict(
                f"queue task {task.id} has another active attempt", code="attempt_active"
            ) from error
    if existing.is_terminal:
        if (existing.state, *[getattr(existing, n) for n in ATTEMPT_OUTCOME_FIELDS]) != (
            report.state,
            *outcome.values(),
        ):
            raise conflict(
                f"queue attempt {report.attempt_id} is terminal and immutable",
                code="attempt_immutable",
            )
        return existing
    for name, value in {**outcome, "state": report.state, "terminal_at": terminal_at}.items():
        setattr(existing, name, value)
    existing.activated_at = existing.activated_at or now
    existing.updated_at = now
    existing.save(
        update_fields=[
            *ATTEMPT_OUTCOME_FIELDS,
            "state",
            "terminal_at",
            "activated_at",
            "updated_at",
        ]
    )
    return existing
