"""Cancellation: staged, authoritative, recorded (seed `cancelRun`, `cancelCommand`).

A cancel request gets the target's next cancel epoch and moves through stages, each
recorded as a `backend_status {phase: cancel-<stage>}` event:
`accepted → persisted → fenced` (the claiming runner's lease had expired) or
`→ delivered → aborting` (a live runner holds the lease and learns through its heartbeat
or the event stream) `→ terminalized`. The store terminalises the target in the same
transaction; whatever the runner reports later is a late write. So the request row is
written once, in the stage it ends in, and the events of a cancel (stages, closed
commands, `terminal_status`) are collected and appended together at its end.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentrun.ids import new_id
from agentrun.raw_sql import RowWrite
from dispatch import intents
from queues import projection as queue_projection
from runs.control_models import CancelRequest, CancelStage
from runs.locks import lock_command, lock_run, lock_run_commands, lock_run_of_command
from runs.models import CANCEL_MARK_FIELDS, Command, CommandState, FailureKind, Run, RunStatus
from runs.phases import Phase
from runs.services.approvals import resolve_pending_approvals_locked
from runs.services.event_log import PendingEvents, collecting
from runs.services.terminal import (
    EndingWrites,
    TurnResult,
    release_claim_locked,
    terminalize_run_locked,
)
from sessions import projection

if TYPE_CHECKING:
    from sessions.models import Session

log = logging.getLogger("agentrun.runs")


@dataclass(frozen=True)
class CancelOutcome:
    """The receipt of a cancel call: the request (None when the target was already
    terminal and never cancelled) and whether this call changed anything."""

    run: Run
    command: Command | None
    cancel_request: CancelRequest | None
    changed: bool


def cancel_run(*, run_id: str, reason: str, requested_by: str | None = None) -> CancelOutcome:
    """Cancel a run and its open commands.

    Locks: the run row, then all its commands, then its session. A terminal run is left
    as it is (its leftover claim is released); the outcome then carries its latest cancel
    request.
    """
    with transaction.atomic(durable=True):
        outcome = cancel_run_locked(lock_run(run_id), reason=reason, requested_by=requested_by)
    log.info(
        "run cancel requested",
        extra={
            "run_id": run_id,
            "changed": outcome.changed,
            "session_id": outcome.run.session_id,
            "cancel_request_id": outcome.cancel_request.id if outcome.cancel_request else None,
        },
    )
    return outcome


def cancel_run_locked(
    run: Run,
    *,
    reason: str,
    requested_by: str | None,
    session: Session | None = None,
    events: PendingEvents | None = None,
    commands: list[Command] | None = None,
) -> CancelOutcome:
    """`cancel_run` inside the caller's transaction, which holds the run lock (session
    cancel and `when_busy=interrupt` use it). `session`: the run's session row when the
    caller has locked it; `events`: the caller's pending events (else they are appended
    here, after the run's other writes); `commands`: all the run's commands when the
    caller has locked them already (in seq order, right after the run)."""
    commands = lock_run_commands(run) if commands is None else commands
    if run.is_terminal:
        release_claim_locked(run)
        intents.fence_open_intents_locked(run=run, reason=reason)
        return CancelOutcome(run, None, _latest_request(run), changed=False)
    with collecting(events) as events:
        cancel = _new_request(run, None, reason=reason, requested_by=requested_by, events=events)
        _set_cancel_mark(run, cancel, at=cancel.created_at, reason=reason)
        _record_stage(events, run, cancel, CancelStage.PERSISTED)
        _deliver(events, run, cancel, runner_live=run.claimed_by is not None)
        # The request, the run's cancel mark and terminal status, its commands and intents:
        # written together, in the statement that ends the run.
        ending = EndingWrites(run_fields=CANCEL_MARK_FIELDS, commands=[RowWrite(cancel)])
        for command in commands:
            if not command.is_terminal:
                ending.commands.append(_mark_command_cancelled(command, cancel, reason=reason))
                ending.intent_reasons[command.id] = reason
                events.add(run, "backend_status", _terminal_payload(command, cancel, reason=reason))
        terminalize_run_locked(
            run,
            result=TurnResult(
                terminal_status=RunStatus.CANCELLED,
                failure_kind=FailureKind.CANCELLED,
                failure_message=reason,
            ),
            session=session,
            events=events,
            detail={"cancel_request_id": cancel.id, "cancel_epoch": cancel.epoch},
            ending=ending,
        )
        _record_stage(events, run, cancel, CancelStage.TERMINALIZED)
    return CancelOutcome(run, None, cancel, changed=True)


def cancel_command(
    *, command_id: str, reason: str, requested_by: str | None = None
) -> CancelOutcome:
    """Cancel one command; the run goes on (seed `cancelCommand`).

    Locks: the run row, then the command.
    """
    with transaction.atomic(durable=True):
        run = lock_run_of_command(command_id)
        if run.is_terminal:
            release_claim_locked(run)
        command = lock_command(command_id, run=run)
        if command.is_terminal:
            intents.fence_open_intents_locked(run=run, command=command, reason=reason)
            latest = CancelRequest.objects.filter(command=command).order_by("-created_at").first()
            return CancelOutcome(run, command, latest, changed=False)
        events = PendingEvents()
        cancel = _cancel_open_command_locked(
            run, command, reason=reason, requested_by=requested_by, events=events
        )
        events.append_locked()
    return CancelOutcome(run, command, cancel, changed=True)


def _cancel_open_command_locked(
    run: Run, command: Command, *, reason: str, requested_by: str | None, events: PendingEvents
) -> CancelRequest:
    """Open the request, cancel the command, record every stage, project the turn's end
    onto its session and task. Needs the run and command locks."""
    cancel = _new_request(run, command, reason=reason, requested_by=requested_by, events=events)
    cancel.save(force_insert=True)
    _mark_command_cancelled(command, cancel, reason=reason)
    command.save(update_fields=["state", *CANCEL_MARK_FIELDS, "updated_at"])
    intents.fence_open_intents_locked(run=run, command=command, reason=reason)
    resolve_pending_approvals_locked(
        run, state="cancelled", reason=reason, command_id=command.id, events=events
    )
    _record_stage(events, run, cancel, CancelStage.PERSISTED)
    runner_live = run.claimed_by is not None or command.acknowledged_at is not None
    _deliver(
        events,
        run,
        cancel,
        runner_live=runner_live,
        command_state=CommandState.ACKNOWLEDGED
        if command.acknowledged_at
        else CommandState.PENDING,
    )
    events.add(run, "backend_status", _terminal_payload(command, cancel, reason=reason))
    _record_stage(events, run, cancel, CancelStage.TERMINALIZED)
    projection.project_command_terminal_locked(
        run, command, terminal_status=RunStatus.CANCELLED, failure_kind=FailureKind.CANCELLED
    )
    if command.type == "turn":
        queue_projection.on_command_cancelled_locked(run, command)  # a task's turn
    return cancel


def _latest_request(run: Run) -> CancelRequest | None:
    return CancelRequest.objects.filter(run=run).order_by("-created_at").first()


def _new_request(
    run: Run,
    command: Command | None,
    *,
    reason: str,
    requested_by: str | None,
    events: PendingEvents,
) -> CancelRequest:
    """The new request (not saved yet: the caller writes it) and its first stage,
    `accepted`, recorded. The row is written once, in the stage it ends in: the
    transaction that opens a request also takes it through every stage to
    `terminalized`, and nobody sees it in between; each stage it passes is recorded as its
    event."""
    target = command or run
    now = timezone.now()
    cancel = CancelRequest(
        id=new_id("cancel"),
        target_kind="command" if command else "run",
        target_id=target.id,
        run=run,
        command=command,
        session_id=run.session_id,
        reason=reason,
        requested_by=requested_by,
        epoch=target.cancel_epoch + 1,
        stage=CancelStage.TERMINALIZED,
        created_at=now,
        updated_at=now,
    )
    _record_stage(events, run, cancel, CancelStage.ACCEPTED)
    return cancel


def _set_cancel_mark(
    row: Run | Command, cancel: CancelRequest, *, at: datetime, reason: str
) -> None:
    row.cancel_epoch = cancel.epoch
    row.cancel_request_id = cancel.id
    row.cancel_requested_at = at
    row.cancel_reason = reason


def _deliver(
    events: PendingEvents, run: Run, cancel: CancelRequest, *, runner_live: bool, **extra: Any
) -> None:
    """`fenced` when the claiming runner's lease expired, else `delivered → aborting` when a
    runner holds it; nothing when no runner ever claimed the run."""
    if run.claimed_by is not None and run.lease_expired(timezone.now()):
        _record_stage(
            events,
            run,
            cancel,
            CancelStage.FENCED,
            claimed_by=run.claimed_by,
            lease_expires_at=run.lease_expires_at.isoformat() if run.lease_expires_at else None,
            **extra,
        )
    elif runner_live:
        for stage in (CancelStage.DELIVERED, CancelStage.ABORTING):
            _record_stage(events, run, cancel, stage, claimed_by=run.claimed_by, **extra)


def _record_stage(
    events: PendingEvents, run: Run, cancel: CancelRequest, stage: str, **extra: Any
) -> None:
    events.add(
        run,
        "backend_status",
        {
            "phase": Phase.cancel_stage(stage),
            "cancel_request_id": cancel.id,
            "cancel_epoch": cancel.epoch,
            "target_kind": cancel.target_kind,
            "target_id": cancel.target_id,
            **extra,
        },
    )


def _mark_command_cancelled(command: Command, cancel: CancelRequest, *, reason: str) -> RowWrite:
    """Cancel the command on its instance; its changed columns, for the caller to write."""
    now = timezone.now()
    command.state = CommandState.CANCELLED
    _set_cancel_mark(command, cancel, at=now, reason=reason)
    command.updated_at = now
    return RowWrite(command, ("state", *CANCEL_MARK_FIELDS, "updated_at"))


def _terminal_payload(command: Command, cancel: CancelRequest, *, reason: str) -> dict[str, Any]:
    return {
        "phase": Phase.COMMAND_TERMINAL,
        "command_id": command.id,
        "state": CommandState.CANCELLED,
        "terminal_status": RunStatus.CANCELLED,
        "failure_kind": FailureKind.CANCELLED,
        "message": reason,
        "cancel_request_id": cancel.id,
        "cancel_epoch": cancel.epoch,
    }
