"""Replacing a turn whose runner is gone (seed `terminalizeStaleSessionAdmissionWithClient`).

A turn is stale when a runner claimed its run and the lease expired without a heartbeat:
the runner died or lost the API. A new turn may then take the session over; the stale
run is failed `infra-failed` with its events, so its history says what happened.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from runs.locks import lock_run_commands
from runs.models import Command, Run
from runs.services.events import append_event_locked
from runs.services.lifecycle import TurnResult, terminalize_run_locked

REASON = "session-turn-admission-stale-lease"
MESSAGE = "session turn admission replaced a stale runner lease"


def turn_is_stale(run: Run, *, now: datetime) -> bool:
    return run.claimed_by is not None and run.lease_expired(now)


def terminalize_stale_turn_locked(run: Run, command: Command) -> None:
    """Fail the stale run and its open commands. Needs the run lock (and its commands')."""
    append_event_locked(
        run=run,
        type="backend_status",
        payload={
            "phase": "session-turn-admission-stale-terminalized",
            "reason": REASON,
            "command_id": command.id,
            "claimed_by": run.claimed_by,
            "lease_expires_at": run.lease_expires_at.isoformat() if run.lease_expires_at else None,
            "failure_kind": "infra-failed",
        },
    )
    for open_command in lock_run_commands(run):
        if open_command.is_terminal:
            continue
        open_command.state = "failed"
        open_command.updated_at = timezone.now()
        open_command.save(update_fields=["state", "updated_at"])
        append_event_locked(
            run=run,
            type="backend_status",
            payload={
                "phase": "command-terminal",
                "reason": REASON,
                "command_id": open_command.id,
                "state": "failed",
                "terminal_status": "failed",
                "failure_kind": "infra-failed",
                "message": MESSAGE,
            },
        )
    terminalize_run_locked(
        run,
        result=TurnResult(
            terminal_status="failed",
            failure_kind="infra-failed",
            failure_message=MESSAGE,
        ),
    )
