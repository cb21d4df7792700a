"""Commands: create (turn, steer, interrupt), ack, finish.

A command gets the next per-run seq under the run lock. An idempotency key is unique per
run: the same key with the same payload returns the existing command, with another
payload it is a 409. Creating a turn or steer appends a `user_message`; the first command
of a run appends `backend_status {phase: run-created}`; every command appends
`backend_status {phase: command-created}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agentrun.errors import conflict
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from agentrun.row_inserts import insert_row, pending_inserts
from dispatch import intents
from runs.locks import lock_command, lock_run, lock_run_of_command
from runs.models import Command, CommandState, Run, RunStatus
from runs.phases import Phase
from runs.services.approvals import resolve_pending_approvals_locked
from runs.services.event_log import (
    PendingEvents,
    collecting,
    fence_runner_write,
)
from runs.services.refusals import record_losing_report_locked, refuse_if_terminal
from runs.services.terminal import TurnResult, fence_finish_report, record_thread_locked
from sessions import projection

if TYPE_CHECKING:
    from sessions.models import Session

_STATE_FROM_TERMINAL: dict[str, str] = {
    RunStatus.COMPLETED: CommandState.COMPLETED,
    RunStatus.CANCELLED: CommandState.CANCELLED,
}


@dataclass(frozen=True)
class CreatedCommand:
    command: Command
    created: bool


def create_command(
    *,
    run_id: str,
    type: str,
    payload: dict[str, Any],
    idempotency_key: str | None = None,
    dispatch: dict[str, Any] | None = None,
) -> CreatedCommand:
    """Append a command to a live run (seed `createCommandWithClient`).

    `dispatch` (a JSON object, `{}` for the default launcher) records a runner dispatch
    intent in the same transaction. Locks: the run row. Errors: 404; 409 on a terminal
    run; 409 when the idempotency key was used with another type, payload or dispatch.
    """
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        return create_command_locked(
            run, type=type, payload=payload, idempotency_key=idempotency_key, dispatch=dispatch
        )


def create_command_locked(
    run: Run,
    *,
    type: str,
    payload: dict[str, Any],
    idempotency_key: str | None,
    dispatch: dict[str, Any] | None,
    session: Session | None = None,
    events: PendingEvents | None = None,
) -> CreatedCommand:
    """`create_command` inside a caller's transaction that holds the run lock (sessions
    admit turns and steers through this). `session`: the run's session row when the
    caller has locked it; `events`: the caller's pending events (else they are appended
    here)."""
    replay = _replay(run, type=type, payload=payload, idempotency_key=idempotency_key)
    if replay is not None:
        intents.check_intent_replay(
            command=replay, intent=intents.intent_of(replay), request=dispatch
        )
        return CreatedCommand(replay, created=False)
    refuse_if_terminal(run)
    with collecting(events) as events:
        command = _insert_command(
            run,
            type=type,
            payload=payload,
            idempotency_key=idempotency_key,
            session=session,
            events=events,
        )
    if dispatch is not None:
        intents.record_intent_locked(run=run, command=command, request=dispatch)
    return CreatedCommand(command, created=True)


def _replay(
    run: Run, *, type: str, payload: dict[str, Any], idempotency_key: str | None
) -> Command | None:
    if idempotency_key is None:
        return None
    existing = Command.objects.filter(run=run, idempotency_key=idempotency_key).first()
    if existing is None:
        return None
    if existing.type != type or existing.payload_hash != stable_hash(payload):
        raise conflict(
            f"idempotency key {idempotency_key!r} was used with a different command",
            code="idempotency_mismatch",
            command_id=existing.id,
        )
    return existing


def _insert_command(
    run: Run,
    *,
    type: str,
    payload: dict[str, Any],
    idempotency_key: str | None,
    session: Session | None,
    events: PendingEvents,
) -> Command:
    """Insert the command, project it onto the session, collect its events. Needs the run
    lock."""
    seq = _next_seq(run)
    now = timezone.now()
    command = Command(
        id=new_id("cmd"),
        run=run,
        seq=seq,
        type=type,
        payload=payload,
        payload_hash=stable_hash(payload),
        idempotency_key=idempotency_key,
        state=CommandState.PENDING,
        created_at=now,
        updated_at=now,
    )
    insert_row(command)  # now, or with the caller's other new rows (`agentrun.row_inserts`)
    text = payload.get("text")
    if type == "turn":
        projection.project_turn_started_locked(
            run, command_id=command.id, text=text, session=session
        )
    elif type == "steer":
        projection.project_steer_locked(run, command_id=command.id, session=session)
    if type in ("turn", "steer"):
        events.add(
            run,
            "user_message",
            {
                "command_id": command.id,
                "command_type": type,
                "text": text,
                "session_id": run.session_id,
            },
        )
    if seq == 1:
        events.add(
            run,
            "backend_status",
            {
                "phase": Phase.RUN_CREATED,
                "run_id": run.id,
                "project_id": run.project_id,
                "backend_profile": run.backend_profile,
                "provider_id": run.provider_id,
                "session_id": run.session_id,
            },
        )
    events.add(
        run,
        "backend_status",
        {"phase": Phase.COMMAND_CREATED, "command_id": command.id, "command_type": type},
    )
    return command


def _next_seq(run: Run) -> int:
    """The run's next command seq. A run this block created and has not inserted yet has no
    commands but those pending with it: no query."""
    pending = pending_inserts()
    if pending is not None and pending.is_pending(run):
        return len(pending.pending_of(Command, run_id=run.id)) + 1
    return (Command.objects.filter(run=run).aggregate(last=Max("seq"))["last"] or 0) + 1


def ack_command(*, command_id: str, runner_id: str, lease_epoch: int) -> Command:
    """Acknowledge receipt: `pending → acknowledged` (idempotent); a claimed run starts running.

    Locks: the run row, then the command. Errors: 404; 409 `stale_lease`.
    """
    with transaction.atomic(durable=True):
        run, command = _lock_command_and_run(command_id)
        refusal = fence_runner_write(
            run,
            runner_id=runner_id,
            lease_epoch=lease_epoch,
            source="command-ack",
            command_id=command_id,
        )
        if refusal is None and command.state == CommandState.PENDING:
            now = timezone.now()
            command.state = CommandState.ACKNOWLEDGED
            command.acknowledged_at = now
            command.updated_at = now
            command.save(update_fields=["state", "acknowledged_at", "updated_at"])
            if run.status == RunStatus.CLAIMED:
                run.status = RunStatus.RUNNING
                run.updated_at = now
                run.save(update_fields=["status", "updated_at"])
    if refusal:
        raise refusal
    return command


def _lock_command_and_run(command_id: str) -> tuple[Run, Command]:
    """A runner's report on a command: the run row, then the command, locked (the fence's
    refusal is recorded as an event and raised by the caller after the commit)."""
    run = lock_run_of_command(command_id)
    return run, lock_command(command_id, run=run)


def finish_command(
    *, command_id: str, runner_id: str, lease_epoch: int, result: TurnResult
) -> Command:
    """Terminalise a command with the runner's result (seed `finishCommand`).

    Locks: the run row, then the command. A terminal command is left as it is; if it was
    cancelled and the report is not a cancel, a `late-write-rejected` event records it.
    Errors: 404; 409 `stale_lease`.
    """
    with transaction.atomic(durable=True):
        run, command = _lock_command_and_run(command_id)
        refusal = fence_finish_report(
            run, runner_id, lease_epoch, result, source="command-status", command_id=command_id
        )
        if refusal is None and command.is_terminal:
            intents.fence_open_intents_locked(
                run=run, command=command, reason="command is terminal"
            )
            if (
                command.state == CommandState.CANCELLED
                and result.terminal_status != RunStatus.CANCELLED
            ):
                record_losing_report_locked(
                    run,
                    source="command-status",
                    runner_id=runner_id,
                    reason="the command was cancelled",
                    result=result,
                    command_id=command_id,
                )
        elif refusal is None:
            events = PendingEvents()
            record_thread_locked(run, result=result, events=events)
            _terminalize_command_locked(run, command, result=result, events=events)
            events.append_locked()
    if refusal:
        raise refusal
    return command


def _terminalize_command_locked(
    run: Run, command: Command, *, result: TurnResult, events: PendingEvents
) -> None:
    command.state = _STATE_FROM_TERMINAL.get(result.terminal_status, CommandState.FAILED)
    command.updated_at = timezone.now()
    command.save(update_fields=["state", "updated_at"])
    resolve_pending_approvals_locked(
        run, state="cancelled", reason="its turn ended", command_id=command.id, events=events
    )
    intents.fence_open_intents_locked(
        run=run, command=command, reason=f"command terminalized as {command.state}"
    )
    projection.project_command_terminal_locked(
        run, command, terminal_status=result.terminal_status, failure_kind=result.failure_kind
    )
    events.add(
        run,
        "backend_status",
        {
            "phase": Phase.COMMAND_TERMINAL,
            "command_id": command.id,
            "state": command.state,
            **result.as_payload(),
        },
    )
