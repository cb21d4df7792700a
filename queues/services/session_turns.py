"""Queued session turns: `when_busy=enqueue` files the turn as a task in the session's lane.

This is the queue behind `sessions.turn_queue`: `SessionTurnQueue` is installed there by
`queues.apps` (sessions sits below queues and cannot import it). Admission calls it inside
its transaction, under the session's admission lock, so concurrent enqueues to one session
are serialised and the position they report is exact at commit. The task keeps everything
the turn needs: the run spec (its refs, session and policy), the command payload and
dispatch request, and in `metadata.session_turn` the turn's reserved run id, idempotency
key and trace sink, which the scheduler passes to `admit_turn_locked` unchanged when the
session goes idle (so the client's own retry of the request replays the admitted turn).
Replaying the same key returns the same task (its idempotency key is
`session-turn:<session>:<key>`).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrun import conf
from agentrun.tenancy import Scope
from queues.models import QueueTask
from queues.selectors import has_queued_turns, queue_position
from queues.services.tasks import TaskSpec, create_task_locked
from sessions.models import title_from_text
from sessions.turns import Admission, TurnRequest


@dataclass(frozen=True)
class QueuedTurn:
    task: QueueTask
    position: int | None  # 1 = next to be admitted; None once it is no longer pending
    created: bool


def session_lane(session_id: str) -> str:
    """The `lane` label of a session's queued turns. A label only: every read of it is
    within one tenant's tasks, and what holds a turn back (the claim, `has_queued_turns`,
    `queue_position`) matches the task's tenant as well as the session id."""
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
        queue=conf.queue_session_turns_queue(),
        lane=session_lane(request.session_id),
        title=title_from_text(request.payload.get("text")) or "session turn",
        priority=conf.queue_session_turn_priority(),
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


class SessionTurnQueue:
    """`sessions.turn_queue.TurnQueue`, for admission's `when_busy=enqueue`."""

    def has_queued_turns(self, *, scope: Scope, session_id: str) -> bool:
        return has_queued_turns(scope=scope, session_id=session_id)

    def enqueue_turn_locked(self, request: TurnRequest) -> Admission:
        queued = enqueue_session_turn_locked(request)
        return Admission("queued", None, None, task_id=queued.task.id, position=queued.position)
