"""Steering and session cancel: acting on a session's active turn, under its admission lock.

A steer lands on the active turn's run as its next command (seed `admitSessionSteer`),
while the run and its turn command are still receivable (neither terminal); a runner picks
steers up after the turn it is executing. Session cancel cancels the active turn's run.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agentrun.errors import conflict
from agentrun.locks import LockKey, advisory_xact_lock
from agentrun.tenancy import Scope
from runs.services.cancellation import CancelOutcome, cancel_run_locked
from runs.services.command_lifecycle import CreatedCommand, create_command_locked
from sessions.services.admission import ActiveTurn, lock_active_turn
from sessions.sql import read_session


def _active_turn(session_id: str, scope: Scope, *, all_commands: bool = False) -> ActiveTurn | None:
    """The session's live active turn, locked (`lock_active_turn`). The observed row is
    read raw (`sessions.sql`): a round trip without the ORM's query compilation."""
    observed = read_session(session_id)
    return lock_active_turn(
        scope.require(observed, kind="session", object_id=session_id), all_commands=all_commands
    )


def admit_steer(
    *,
    session_id: str,
    scope: Scope,
    payload: dict[str, Any],
    idempotency_key: str | None = None,
    expected_turn_id: str | None = None,
) -> CreatedCommand:
    """Append a steer to the active turn. Locks: the session's admission lock, the active
    run, its command, the session row. Errors: 404; 409 `no_active_turn`; 409 `stale_turn`."""
    with transaction.atomic(durable=True):
        advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, session_id)
        active = _active_turn(session_id, scope)
        if active is None:
            raise conflict(
                f"session {session_id} has no active turn to steer", code="no_active_turn"
            )
        if expected_turn_id is not None and expected_turn_id != active.command.id:
            raise conflict(
                f"expected_turn_id {expected_turn_id} is not the active turn ({active.command.id})",
                code="stale_turn",
                active_turn_id=active.command.id,
            )
        return create_command_locked(
            active.run,
            type="steer",
            payload=payload,
            idempotency_key=idempotency_key,
            dispatch=None,
            session=active.session,
        )


def cancel_session(
    *, session_id: str, scope: Scope, reason: str, requested_by: str | None
) -> CancelOutcome | None:
    """Cancel the session's active turn; None when it has none (nothing changes)."""
    with transaction.atomic(durable=True):
        advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, session_id)
        # Every command of the run locked once, with the run (run → commands → session):
        # the cancel closes them all, and would otherwise lock them again.
        active = _active_turn(session_id, scope, all_commands=True)
        if active is None:
            return None
        return cancel_run_locked(
            active.run,
            reason=reason,
            requested_by=requested_by,
            session=active.session,
            commands=active.commands,
        )
