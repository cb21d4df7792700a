"""Row locks of the work queue, and the scheduler's SKIP LOCKED claim.

Lock order, everywhere: a run row (runs/locks.py) before its task row, the task row
before its attempt rows, attempts by `retry_index`. The projector runs inside the run's
terminalisation (run lock held) and then locks the task; so nothing may lock a run while
holding a task lock, except a run it has just created itself (the scheduler and retry
activation do that). Every helper must be called inside the service's transaction.

`no_key=True` throughout: the queue never changes a task's or attempt's primary key, and
a plain `FOR UPDATE` would also block the read-cursor upserts whose foreign key takes
`FOR KEY SHARE` on the task row.
"""

from __future__ import annotations

from collections.abc import Collection

from agentrun.errors import not_found
from agentrun.tenancy import Scope
from queues.models import QueueAttempt, QueueTask


def lock_task(task_id: str, *, scope: Scope) -> QueueTask:
    """`SELECT … FOR NO KEY UPDATE` the task; 404 if it does not exist or is outside
    `scope`. Serialises every write of one task."""
    tasks = QueueTask.objects.select_for_update(no_key=True)
    return scope.get_or_404(tasks, task_id, kind="queue task")


def lock_task_if_exists(task_id: str) -> QueueTask | None:
    """Lock the task, or None when it is gone (the projector tolerates a deleted task)."""
    return QueueTask.objects.select_for_update(no_key=True).filter(pk=task_id).first()


def lock_attempts(task: QueueTask) -> list[QueueAttempt]:
    """Lock every attempt of a locked task, in retry order (retry reserve reads them all)."""
    attempts = QueueAttempt.objects.select_for_update(no_key=True).filter(task=task)
    return list(attempts.order_by("retry_index"))


def lock_attempt(task: QueueTask, attempt_id: str) -> QueueAttempt:
    """Lock one attempt of a locked task; 404 if it is not that task's."""
    attempt = (
        QueueAttempt.objects.select_for_update(no_key=True)
        .filter(task=task, attempt_id=attempt_id)
        .first()
    )
    if attempt is None:
        raise not_found("queue attempt", attempt_id)
    return attempt


def lock_attempt_of_run(task: QueueTask, run_id: str) -> QueueAttempt | None:
    """Lock the attempt of a locked task that ran `run_id` (the projector's lookup)."""
    attempts = QueueAttempt.objects.select_for_update(no_key=True).filter(task=task, run_id=run_id)
    return attempts.order_by("-retry_index").first()


# The claim, in SQL (the ORM builds this query in several milliseconds per call, more
# than the query itself takes). `(created_at, id)` orders a session's tasks oldest first.
# A session's lane is its tenant's tasks naming it (issue 16): another tenant's task naming
# the same session id neither holds this tenant's turns nor waits on its session.
_CLAIM_SQL = """
SELECT t.* FROM agentrun_queue_tasks AS t
WHERE t.state = 'pending'
  AND NOT (t.id = ANY(%(skip_ids)s::text[]))
  AND NOT (t.queue = ANY(%(full_queues)s::text[]))
  AND (
    t.session_ref ->> 'session_id' IS NULL
    OR (
      NOT EXISTS (
        SELECT 1 FROM agentrun_queue_tasks AS o
        WHERE o.session_ref ->> 'session_id' = t.session_ref ->> 'session_id'
          AND o.tenant_id = t.tenant_id
          AND o.state IN ('pending', 'running')
          AND (o.state = 'running' OR (o.created_at, o.id) < (t.created_at, t.id))
      )
      AND NOT EXISTS (
        SELECT 1 FROM agentrun_sessions AS s
        WHERE s.session_id = t.session_ref ->> 'session_id'
          AND s.tenant_id = t.tenant_id
          AND (s.active_run_id IS NOT NULL OR s.active_command_id IS NOT NULL)
      )
    )
  )
ORDER BY t.priority DESC, t.created_at ASC, t.id ASC
LIMIT 1
FOR NO KEY UPDATE OF t SKIP LOCKED
"""


def claim_next_pending(
    *, skip_ids: Collection[str], full_queues: Collection[str]
) -> QueueTask | None:
    """Lock the pending task to start next, or None: highest priority first, then oldest.

    `SELECT … FOR NO KEY UPDATE OF t SKIP LOCKED LIMIT 1` (raw SQL, see `_CLAIM_SQL`): a
    task another scheduler holds is skipped, not waited for, so workers running at once
    never start one task twice (the row is `pending` under the lock, and starting it makes
    it `running` in the same transaction; a row another worker committed meanwhile fails
    the re-check PostgreSQL applies to a locked row). Not eligible: tasks in `full_queues`
    or `skip_ids` (left pending earlier in this batch), and a session's task unless it is
    the session's oldest pending task, no task of that session is running and the session
    has no active turn, so queued turns are admitted one at a time, in order. `OF t` keeps
    the rows the subqueries read unlocked.
    """
    params = {"skip_ids": list(skip_ids), "full_queues": list(full_queues)}
    return next(iter(QueueTask.objects.raw(_CLAIM_SQL, params)), None)
