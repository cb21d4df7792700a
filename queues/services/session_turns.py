"""Queued session turns: `when_busy=enqueue` files the turn as a task in the session's lane.

Called by `sessions.services.admission.admit_turn` inside its transaction, under the
session's admission lock, so concurrent enqueues to one session are serialised and the
position they report is exact at commit. The task keeps everything the turn needs: the run
spec (its refs, session and policy), the command payload and dispatch request, and in
`metadata.session_turn` the turn's reserved run id, idempotency key and trace sink, which
the scheduler passes to `admit_turn` unchanged when the session goes idle (so the client's
own retry of the request replays the admitted turn). Replaying the same key
returns the same task (its idempotency key is `session-turn:<session>:<key>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Q
from django.db.models.fields.json import KT

from queues.models import QueueTask
from queues.services.projection import has_queued_turns
from queues.services.tasks import TaskSpec, create_task_locked
from sessions.services.projection import title_from_text

__all__ = ["QueuedTurn", "enqueue_session_turn_locked", "has_queued_turns", "queue_position"]

if TYPE_CHECKING:
    from sessions.services.admission import TurnRequest


@dataclass(frozen=True)
class QueuedTurn:
    task: QueueTask
    position: int | None  # 1 = next to be admitted; None once it is no longer pending
    created: bool


def session_lane(session_id: str) -> str:
    return f"session:{session_id}"


def enqueue_session_turn_locked(request: TurnRequest) -> QueuedTurn:
    """File the turn as a pending task of the session's lane, or replay it by key.

    Needs the admission transaction and its session lock. Side effect after commit: wakes
    the scheduler. Errors: 409 `idempotency_mismatch` for a key reused with another turn.
    """
    spec = request.spec
    key = request.idempotency_key
    task_spec = TaskSpec(
        project_id=spec.project_id,
        queue=settings.AGENTRUN_QUEUE_SESSION_TURNS_QUEUE,
        lane=session_lane(request.session_id),
        title=title_from_text(request.payload.get("text")) or "session turn",
        priority=settings.AGENTRUN_QUEUE_SESSION_TURN_PRIORITY,
        backend_profile=spec.backend_profile,
        provider_id=spec.provider_id,
        workspace_ref=spec.workspace_ref,
        payload=request.payload,
        session_ref=spec.session_ref,
        execution_policy=spec.execution_policy,
        resource_bundle_ref=spec.resource_bundle_ref,
        metadata={
            "session_turn": {
                "run_id": request.run_id,
                "idempotency_key": key,
                "trace_sink": spec.trace_sink,
            }
        },
        dispatch=request.dispatch,
        idempotency_key=f"session-turn:{request.session_id}:{key}" if key else None,
    )
    created = create_task_locked(tenant_id=request.tenant_id, spec=task_spec)
    return QueuedTurn(created.task, queue_position(created.task), created.created)


def queue_position(task: QueueTask) -> int | None:
    """1-based place of a pending task among its session's pending tasks, oldest first
    (the order the scheduler admits them in); None when the task is not pending."""
    if task.state != "pending" or task.session_id is None:
        return None
    tasks = QueueTask.objects.annotate(sid=KT("session_ref__session_id"))
    ahead = tasks.filter(sid=task.session_id, state="pending").filter(
        Q(created_at__lt=task.created_at) | Q(created_at=task.created_at, id__lt=task.id)
    )
    return ahead.count() + 1
