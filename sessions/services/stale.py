"""Replacing a turn whose runner is gone (seed `terminalizeStaleSessionAdmissionWithClient`).

A turn is stale when a runner claimed its run and the lease expired without a heartbeat:
the runner died or lost the API. A new turn may then take the session over; the stale
run is failed `infra-failed` with its events, so its history says what happened.
"""

from __future__ import annotations

from datetime import datetime

from runs.models import Command, Run
from runs.phases import Phase
from runs.services.event_log import PendingEvents
from runs.services.reaper import InfraFailure, fail_run_locked
from sessions.models import Session

MESSAGE = "session turn admission replaced a stale runner lease"
REASON = "session-turn-admission-stale-lease"  # the seed's reason code


def turn_is_stale(run: Run, *, now: datetime) -> bool:
    return run.claimed_by is not None and run.lease_expired(now)


def terminalize_stale_turn_locked(
    run: Run, command: Command, *, session: Session, events: PendingEvents
) -> None:
    """Fail the stale run and its open commands `infra-failed`, its events collected in the
    admission's pending `events`. Needs the run lock and the (locked) `session` row."""
    expires_at = run.lease_expires_at
    facts = {
        "command_id": command.id,
        "claimed_by": run.claimed_by,
        "lease_expires_at": expires_at.isoformat() if expires_at else None,
    }
    phase = Phase.SESSION_TURN_ADMISSION_STALE_TERMINALIZED
    failure = InfraFailure(phase=phase, reason=MESSAGE, code=REASON, facts=facts)
    fail_run_locked(run, failure, session=session, events=events)
