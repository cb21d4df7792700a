"""Turning a task into a run: a session turn when the task names a session, else a run
and a `turn` command, with the task's dispatch request (`{}` by default: launch a runner).

Not a service: it runs inside the scheduler's or retry activation's transaction, holding
the task lock. The only run it locks is the one it has just created (the lock order is run
→ task). For a session task it first takes the session's admission lock and refuses
(409 `session_busy`) while the session has an active turn, so `admit_turn_locked` never
needs to lock another turn's run.

The run's `trace_sink` names the task and lane, which is how the run's terminalisation
finds the task to project onto — except for the first start of a turn queued by
`when_busy=enqueue`: that is admitted exactly as its client asked (reserved run id,
idempotency key, trace sink), so the client's own retry of the request replays the turn;
the projector finds such a run through its attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrun.errors import conflict
from agentrun.locks import LockKey, advisory_xact_lock
from dispatch.selectors import intent_of
from queues.models import QueueTask
from runs.locks import lock_run
from runs.models import Command, Run
from runs.selectors import default_provider_id
from runs.services.command_lifecycle import create_command_locked
from runs.services.lifecycle import RunSpec, create_run_locked
from sessions.models import Session
from sessions.services.admission import admit_turn_locked
from sessions.turns import TurnRequest


@dataclass(frozen=True)
class StartedTurn:
    run: Run
    command: Command
    runner_job_id: str | None


def run_spec_of(task: QueueTask, *, trace_sink: dict[str, Any] | None) -> RunSpec:
    return RunSpec(
        project_id=task.project_id,
        workspace_ref=task.workspace_ref or {},
        provider_id=task.provider_id or default_provider_id(task.backend_profile),
        backend_profile=task.backend_profile,
        execution_policy=task.execution_policy or {},
        session_ref=task.session_ref,
        resource_bundle_ref=task.resource_bundle_ref,
        trace_sink=trace_sink,
    )


def turn_payload(task: QueueTask) -> dict[str, Any]:
    """The turn command's payload: the task's, with the title as `text` if it has none."""
    payload = dict(task.payload)
    if not isinstance(payload.get("text"), str) or not payload["text"]:
        payload["text"] = task.title
    return payload


def session_turn_request(task: QueueTask) -> dict[str, Any]:
    """What a queued session turn asked for (run id, idempotency key), if it was one."""
    value = (task.metadata or {}).get("session_turn")
    return value if isinstance(value, dict) else {}


def start_task_turn_locked(task: QueueTask, *, retry_run_id: str | None = None) -> StartedTurn:
    """Create the task's run and turn command (see module doc); `retry_run_id` is the run
    id a reserved retry attempt names. Needs the task lock.

    Errors: those of run creation and admission (400 unknown backend, 409
    `session_boundary`, `session_busy`, `idempotency_mismatch`), and 409 `run_exists` when
    a reserved run id was already taken by someone else.
    """
    queued = session_turn_request(task) if retry_run_id is None else {}
    own_sink = {"task_id": task.id, "lane": task.lane}
    spec = run_spec_of(task, trace_sink=queued.get("trace_sink") if queued else own_sink)
    run_id = retry_run_id or queued.get("run_id")
    if task.session_id is not None:
        return _start_session_turn(task, spec, run_id, queued.get("idempotency_key"))
    created = create_run_locked(tenant_id=task.tenant_id, spec=spec, run_id=run_id)
    if not created.created:
        raise conflict(f"run {created.run.id} already exists", code="run_exists")
    run = lock_run(created.run.id)  # the run this transaction just inserted
    command = create_command_locked(
        run, type="turn", payload=turn_payload(task), idempotency_key=None, dispatch=task.dispatch
    ).command
    return _started(run, command)


def _start_session_turn(
    task: QueueTask, spec: RunSpec, run_id: str | None, idempotency_key: str | None
) -> StartedTurn:
    """Admit the task's turn to its idle session (409 `session_busy` otherwise). Takes the
    session's admission lock before looking, so the answer holds until commit."""
    session_id = task.session_id
    assert session_id is not None
    advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, session_id)  # held for admit_turn_locked
    session = Session.objects.filter(pk=session_id).first()
    if session is not None and session.has_active_turn:
        raise conflict(f"session {session_id} is busy", code="session_busy")
    admission = admit_turn_locked(
        request=TurnRequest(
            session_id=session_id,
            tenant_id=task.tenant_id,
            spec=spec,
            payload=turn_payload(task),
            run_id=run_id,
            idempotency_key=idempotency_key,
            dispatch=task.dispatch,
            when_busy="reject",
            requested_by=f"queue:{task.id}",
        )
    )
    assert admission.run is not None and admission.command is not None
    return _started(admission.run, admission.command)


def _started(run: Run, command: Command) -> StartedTurn:
    intent = intent_of(command)
    return StartedTurn(run, command, intent.runner_job_id if intent else None)
