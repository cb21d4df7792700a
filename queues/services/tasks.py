"""Filing, cancelling and reading tasks (seed `createQueueTask`, `cancelQueueTask`,
`markQueueTaskRead`).

- Create is idempotent per (tenant, project, idempotency key): the same input again
  returns the existing task, another input is a 409. `payload_hash` is the stable hash of
  everything the client gave except the key, so it also proves a row was not altered.
- Cancel cascades: a running task's latest run is cancelled through the runs services,
  whose terminalisation projects the outcome back onto the task and attempt (run lock →
  task lock); a pending task is simply cancelled. Cancelling a terminal task changes
  nothing.
- Mark read stores the task's current version for a reader; the task is unread for that
  reader while its version is newer.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agentrun.errors import AgentRunError, conflict, invalid
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from agentrun.tenancy import Scope
from queues.locks import lock_task
from queues.models import (
    ACTIVE_ATTEMPT_STATES,
    AttemptState,
    QueueAttempt,
    QueueReadCursor,
    QueueTask,
    TaskState,
)
from queues.services.transitions import finish_attempt_locked, move_task_locked
from queues.versions import next_queue_version
from queues.wakeup import wake_scheduler
from runs.locks import lock_run
from runs.models import Backend, FailureKind, Run
from runs.services.cancellation import cancel_run_locked


@dataclass(frozen=True)
class TaskSpec:
    """What a client files (the tenant comes from its key)."""

    project_id: str
    queue: str
    lane: str
    title: str
    priority: int
    backend_profile: str
    provider_id: str | None
    workspace_ref: dict[str, Any] | None
    payload: dict[str, Any]
    session_ref: dict[str, Any] | None = None
    execution_policy: dict[str, Any] | None = None
    resource_bundle_ref: dict[str, Any] | None = None
    references: list[Any] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    dispatch: dict[str, Any] | None = field(default_factory=dict)
    idempotency_key: str | None = None

    def fingerprint(self, tenant_id: str) -> str:
        values = asdict(self)
        values.pop("idempotency_key")
        return stable_hash({"tenant_id": tenant_id, **values})


def spec_of(task: QueueTask) -> TaskSpec:
    """The spec a stored task was filed with (for replays and the integrity check)."""
    names = TaskSpec.__dataclass_fields__
    return TaskSpec(**{name: getattr(task, name) for name in names})


@dataclass(frozen=True)
class CreatedTask:
    task: QueueTask
    created: bool


def create_task(*, tenant_id: str, spec: TaskSpec) -> CreatedTask:
    """File a task, or replay the one filed with the same idempotency key.

    Locks: none up front; two concurrent creates with one key meet at the unique index
    (the loser's insert waits for the winner's commit, then replays it). Side effects
    after commit: wakes the scheduler. Errors: 400 unknown backend profile; 409 when the
    key was used with another input.
    """
    with transaction.atomic(durable=True):
        return create_task_locked(tenant_id=tenant_id, spec=spec)


def create_task_locked(*, tenant_id: str, spec: TaskSpec) -> CreatedTask:
    """`create_task` inside the caller's transaction (`when_busy=enqueue` admission)."""
    replay = _replay(tenant_id, spec)
    if replay is not None:
        return replay
    if not Backend.objects.filter(profile=spec.backend_profile).exists():
        raise invalid(
            f"backend_profile: unknown backend profile {spec.backend_profile!r}",
            field="backend_profile",
        )
    task = _new_task(tenant_id, spec)
    try:
        with transaction.atomic():  # a savepoint: a lost key race leaves the outer tx usable
            task.save(force_insert=True)
    except IntegrityError:
        replay = _replay(tenant_id, spec)
        if replay is None:
            raise
        return replay
    transaction.on_commit(wake_scheduler)
    return CreatedTask(task, created=True)


def _new_task(tenant_id: str, spec: TaskSpec) -> QueueTask:
    now = timezone.now()
    session_id = (spec.session_ref or {}).get("session_id")
    values = asdict(spec)
    return QueueTask(
        id=new_id("qt"),
        tenant_id=tenant_id,
        state=TaskState.PENDING,
        version=next_queue_version(),
        payload_hash=spec.fingerprint(tenant_id),
        session_path=f"/api/v1/sessions/{quote(session_id, safe='')}" if session_id else None,
        created_at=now,
        updated_at=now,
        **values,
    )


def _replay(tenant_id: str, spec: TaskSpec) -> CreatedTask | None:
    if spec.idempotency_key is None:
        return None
    existing = QueueTask.objects.filter(
        tenant_id=tenant_id, project_id=spec.project_id, idempotency_key=spec.idempotency_key
    ).first()
    if existing is None:
        return None
    if existing.payload_hash != spec.fingerprint(tenant_id):
        raise conflict(
            f"idempotency key {spec.idempotency_key!r} was used for a different task",
            code="idempotency_mismatch",
            task_id=existing.id,
        )
    return CreatedTask(existing, created=False)


@dataclass(frozen=True)
class CancelledTask:
    task: QueueTask
    changed: bool


class _TaskMoved(Exception):
    """The task started a run between the unlocked read and its lock: start over."""


def cancel_task(
    *, task_id: str, scope: Scope, reason: str, requested_by: str | None = None
) -> CancelledTask:
    """Cancel a task and, through the runs services, its latest attempt's run.

    Locks: the latest attempt's run (it comes first in the lock order), then the task, then
    its attempts. If the scheduler starts the task between the read and the locks, the
    transaction starts over (up to three times, then 409 `task_changed`). Side effects:
    the run's cancel request, stages and events; the task's and attempt's cancelled state.
    Errors: 404 (another tenant's task too).
    """
    for _ in range(3):
        try:
            with transaction.atomic(durable=True):
                return _cancel_once(task_id, scope, reason=reason, requested_by=requested_by)
        except _TaskMoved:
            continue
    raise conflict(f"queue task {task_id} kept changing; retry", code="task_changed")


def _live_run_id(task: QueueTask) -> str | None:
    if task.state != TaskState.RUNNING or not isinstance(task.latest_attempt, dict):
        return None
    run_id = task.latest_attempt.get("run_id")
    return run_id if isinstance(run_id, str) else None


def _cancel_once(
    task_id: str, scope: Scope, *, reason: str, requested_by: str | None
) -> CancelledTask:
    observed = scope.get_or_404(QueueTask.objects.all(), task_id, kind="queue task")
    if observed.is_terminal:
        return CancelledTask(observed, changed=False)
    run_id = _live_run_id(observed)
    run = lock_run(run_id) if run_id and Run.objects.filter(pk=run_id).exists() else None
    task = lock_task(task_id, scope=scope)
    if _live_run_id(task) != run_id:
        raise _TaskMoved
    if task.is_terminal:
        return CancelledTask(task, changed=False)
    if run is not None:  # its terminalisation projects `cancelled` onto the task
        cancel_run_locked(run, reason=reason, requested_by=requested_by)
        task = QueueTask.objects.get(pk=task_id)
    if not task.is_terminal:
        _cancel_attempts_locked(task, reason)
        move_task_locked(
            task,
            state=TaskState.CANCELLED,
            attempt=_latest_attempt(task),
            cancelled_at=timezone.now(),
            cancel_reason=reason,
        )
    return CancelledTask(task, changed=True)


def _cancel_attempts_locked(task: QueueTask, reason: str) -> None:
    """Cancel the task's live attempt (a reserved retry, or a run already gone)."""
    for attempt in QueueAttempt.objects.filter(task=task, state__in=ACTIVE_ATTEMPT_STATES):
        finish_attempt_locked(
            attempt,
            state=AttemptState.CANCELLED,
            failure_kind=FailureKind.CANCELLED,
            failure_message=reason,
        )


def _latest_attempt(task: QueueTask) -> QueueAttempt | None:
    return QueueAttempt.objects.filter(task=task).order_by("-retry_index").first()


def mark_task_read(*, task_id: str, scope: Scope, reader_id: str) -> QueueReadCursor:
    """Record that `reader_id` has read the task as of its current version.

    Locks: none. Two marks racing keep the newer version (`GREATEST`), so a cursor never
    moves backwards; a change committing meanwhile simply leaves the task unread again.
    Errors: 404.
    """
    task = scope.get_or_404(QueueTask.objects.all(), task_id, kind="queue task")
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        # Raw SQL: an upsert that keeps the larger version, which the ORM cannot say.
        cursor.execute(
            """
            INSERT INTO agentrun_queue_read_cursors (task_id, reader_id, task_version, read_at)
            VALUES (%s, %s, %s, %s)
            ON CONFLICT (task_id, reader_id) DO UPDATE
            SET task_version = GREATEST(agentrun_queue_read_cursors.task_version,
                                        EXCLUDED.task_version),
                read_at = EXCLUDED.read_at
            """,
            [task.id, reader_id, task.version, timezone.now()],
        )
    return QueueReadCursor.objects.get(task_id=task.id, reader_id=reader_id)


def check_task_intact(task: QueueTask) -> None:
    """409 when the stored task no longer hashes to its `payload_hash` (seed
    `assertQueueTaskPayloadHash`): a row edited behind the services is not retried."""
    if spec_of(task).fingerprint(task.tenant_id) != task.payload_hash:
        raise AgentRunError(
            f"queue task {task.id} does not match its payload hash",
            code="task_payload_mismatch",
            http_status=409,
        )
