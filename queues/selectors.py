"""Reads of the work queue: scoped lists, the change feed, attempts, stats, commander.

Every read starts from `tasks_for(scope=…)` (the tenant gate, `agentrun.tenancy`): a
client sees its tenant's tasks, an operator every tenant's; anything else is a 404. Two
list orders, never mixed:

- the backlog (`list_tasks`): by priority (highest first), then age, page-numbered;
- the change feed (`task_feed`): tasks whose version is above `changed_after`, in version
  order. It first settles the version feed (`queues.versions`), so walking it never skips
  a change that commits late. (The seed paged its priority order with a version cursor,
  which skips tasks; that is not copied.)

Unscoped reads for the services and the projector (their callers have scoped already):
`task_id_of` (the task a run projects onto), `queue_position` (a session's
`when_busy=enqueue` backlog, within the task's tenant), `full_queues` (the scheduler's
capacity check).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentrun import versions
from agentrun.tenancy import Scope
from queues.models import QueueAttempt, QueueReadCursor, QueueTask, TaskState
from queues.versions import settle_feed
from runs.models import Run

COMMANDER_SIZE = 20
BACKLOG_ORDER = ("-priority", "created_at", "id")


def tasks_for(*, scope: Scope) -> QuerySet[QueueTask]:
    return scope.filter(QueueTask.objects.all())


def get_task_for(*, scope: Scope, task_id: str, reader_id: str | None = None) -> QueueTask:
    tasks = with_read_version(QueueTask.objects.all(), reader_id)
    return scope.get_or_404(tasks, task_id, kind="queue task")


def with_read_version(tasks: QuerySet[QueueTask], reader_id: str | None) -> QuerySet[QueueTask]:
    cursors = QueueReadCursor.objects.all()
    return versions.with_read_version(
        tasks, cursors, row="task", version="task_version", reader_id=reader_id
    )


def filtered(
    scope: QuerySet[QueueTask], *, queue: str | None, state: str | None, lane: str | None
) -> QuerySet[QueueTask]:
    if queue:
        scope = scope.filter(queue=queue)
    if state:
        scope = scope.filter(state=TaskState(state))
    if lane:
        scope = scope.filter(lane=lane)
    return scope


def in_queue(scope: QuerySet[QueueTask], queue: str | None) -> QuerySet[QueueTask]:
    return filtered(scope, queue=queue, state=None, lane=None)


@dataclass(frozen=True)
class TaskPage:
    items: list[QueueTask]
    total: int
    page: int
    page_size: int


def list_tasks(
    *, tasks: QuerySet[QueueTask], reader_id: str | None, page: int, page_size: int
) -> TaskPage:
    """One page of the backlog, by priority then age (two queries: count and page)."""
    total = tasks.count()
    start = (page - 1) * page_size
    ordered = with_read_version(tasks, reader_id).order_by(*BACKLOG_ORDER)
    return TaskPage(list(ordered[start : start + page_size]), total, page, page_size)


@dataclass(frozen=True)
class FeedPage:
    items: list[QueueTask]
    next_changed_after: int


def task_feed(
    *, tasks: QuerySet[QueueTask], reader_id: str | None, changed_after: int, limit: int
) -> FeedPage:
    """Tasks changed after version `changed_after`, oldest change first, and the version to
    continue from. Takes the feed lock exclusively first (waits for writers in flight)."""
    with transaction.atomic():
        settle_feed()
        changed = with_read_version(tasks.filter(version__gt=changed_after), reader_id)
        items = list(changed.order_by("version")[:limit])
    return FeedPage(items, items[-1].version if items else changed_after)


def attempts_of(
    *, task: QueueTask, limit: int, cursor: int | None = None, after_retry_index: int | None = None
) -> list[QueueAttempt]:
    """A task's attempt history: newest first, before retry index `cursor` (the seed's
    `listQueueAttempts`), or — with `after_retry_index` — oldest first after it."""
    attempts = QueueAttempt.objects.filter(task=task)
    if after_retry_index is not None:
        ascending = attempts.filter(retry_index__gt=after_retry_index)
        return list(ascending.order_by("retry_index")[:limit])
    if cursor is not None:
        attempts = attempts.filter(retry_index__lt=cursor)
    return list(attempts.order_by("-retry_index", "-created_at")[:limit])


def queue_stats(*, tasks: QuerySet[QueueTask], queue: str | None) -> dict[str, Any]:
    """Counts by state and by lane (and state), and the oldest pending task's age."""
    by_state = {state: 0 for state in TaskState.values}
    by_lane: dict[str, dict[str, int]] = {}
    rows = tasks.values_list("lane", "state").annotate(count=Count("id")).order_by()
    for lane, state, count in rows:
        by_state[state] = by_state.get(state, 0) + count
        lane_counts = by_lane.setdefault(lane, {"total": 0})
        lane_counts[state] = count
        lane_counts["total"] += count
    oldest = tasks.filter(state=TaskState.PENDING).aggregate(at=Min("created_at"))["at"]
    now = timezone.now()
    return {
        "queue": queue,
        "total": sum(by_state.values()),
        "by_state": by_state,
        "by_lane": dict(sorted(by_lane.items())),
        "oldest_pending_at": oldest,
        "oldest_pending_age_seconds": _age(oldest, now),
        "generated_at": now,
    }


def _age(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else round((now - since).total_seconds(), 3)


def commander(*, tasks: QuerySet[QueueTask], reader_id: str | None) -> list[QueueTask]:
    """The tasks that most need the reader's attention: unread failures and blocks first
    (every failure is unread without a reader), then running, then pending; within each,
    by priority then age. Read failures and finished tasks are left out."""
    read = with_read_version(tasks, reader_id)
    unread_failure = Q(state__in=[TaskState.FAILED, TaskState.BLOCKED]) & Q(
        version__gt=Coalesce(F("read_version"), Value(0))
    )
    attention = Case(
        When(unread_failure, then=Value(0)),
        When(state=TaskState.RUNNING, then=Value(1)),
        When(state=TaskState.PENDING, then=Value(2)),
        default=Value(3),
        output_field=IntegerField(),
    )
    ranked = read.annotate(attention=attention).filter(attention__lt=3)
    return list(ranked.order_by("attention", *BACKLOG_ORDER)[:COMMANDER_SIZE])


def task_id_of(run: Run) -> str | None:
    """The task a run belongs to: the one its `trace_sink` names, else, for a session run,
    the task of the attempt that ran it (a queued session turn is admitted with its
    client's own trace sink; see `queues.services.turns`)."""
    task_id = sink_task_id(run)
    if task_id is not None or run.session_id is None:
        return task_id
    return _attempt_task_ids(run.id).first()


def task_and_queued_turns_of(run: Run) -> tuple[str | None, bool]:
    """`task_id_of(run)`, and `has_queued_turns` of its session (False without one), in
    one query: a run's end asks both (`queues.projection`), and an interrupting turn
    admission ends a run (bench cell 9; two statements before issue 18)."""
    task_id = sink_task_id(run)
    if run.session_id is None:
        return task_id, False
    queued = Exists(queued_turns(scope=Scope.tenant(run.tenant_id), session_id=run.session_id))
    if task_id is not None:
        return task_id, bool(Run.objects.filter(pk=run.id).values_list(queued, flat=True)[0])
    attempt = Subquery(_attempt_task_ids(OuterRef("id"))[:1])
    found, waiting = Run.objects.filter(pk=run.id).values_list(attempt, queued)[0]
    return found, bool(waiting)


def sink_task_id(run: Run) -> str | None:
    """The task a run names in its `trace_sink` (a queue-dispatched run), if any."""
    sink = run.trace_sink
    task_id = sink.get("task_id") if isinstance(sink, dict) else None
    return task_id if isinstance(task_id, str) and task_id else None


def _attempt_task_ids(run_id: Any) -> QuerySet[QueueAttempt, str]:
    attempts = QueueAttempt.objects.filter(run_id=run_id).order_by("task_id", "attempt_id")
    return attempts.values_list("task_id", flat=True)


def queued_turns(*, scope: Scope, session_id: str) -> QuerySet[QueueTask]:
    """The pending tasks of the scope's tenant that wait for this session. A session's lane
    is its tenant's tasks naming it: another tenant's task naming the same id is in that
    tenant's lane and never holds this one's turns (issue 16)."""
    pending = tasks_for(scope=scope).annotate(sid=KT("session_ref__session_id"))
    return pending.filter(sid=session_id, state=TaskState.PENDING)


def has_queued_turns(*, scope: Scope, session_id: str) -> bool:
    """Whether a pending task of the scope's tenant waits for this session."""
    return queued_turns(scope=scope, session_id=session_id).exists()


def queue_position(task: QueueTask) -> int | None:
    """1-based place of a pending task among its session's pending tasks of its own tenant,
    oldest first (the order the scheduler admits them in); None when it is not pending."""
    if task.state != TaskState.PENDING or task.session_id is None:
        return None
    own = tasks_for(scope=Scope.tenant(task.tenant_id))
    tasks = own.annotate(sid=KT("session_ref__session_id"))
    ahead = tasks.filter(sid=task.session_id, state=TaskState.PENDING).filter(
        Q(created_at__lt=task.created_at) | Q(created_at=task.created_at, id__lt=task.id)
    )
    return ahead.count() + 1


def full_queues(limits: dict[str, int]) -> list[str]:
    """The limited queues that have as many running tasks as their limit allows."""
    if not limits:
        return []
    running = dict(
        QueueTask.objects.filter(state=TaskState.RUNNING, queue__in=list(limits))
        .values("queue")
        .annotate(count=Count("id"))
        .values_list("queue", "count")
    )
    return [queue for queue, limit in limits.items() if running.get(queue, 0) >= limit]
