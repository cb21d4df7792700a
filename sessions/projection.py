"""The session projection: how run writes show up on their session row.

This is the sessions module of the projection tier (SPEC §9.1): functions the `runs`
services call inside the run's transaction, in lock order (run → commands → session →
queue → key lock), each named `*_locked`. They take the session row lock after the
caller's run (and command) locks. A visible change takes a new global version
(`sessions.versions`); event appends only advance `last_event_seq` and activity, in the
append's own statement (`runs.sql.insert_events`). Inside `collecting_session_writes()`
(`sessions.session_writes`) the writes stay on the locked row's instance and the row is
written once, at the end of the block (turn admission does this).

A projection module imports only the models, locks and versions of `runs` and of its own
app, plus `agentrun` (`tests/test_projection_layers.py`), so `runs` can call it without
importing anything that imports `runs` services back.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from agentrun.errors import conflict
from agentrun.tenancy import Scope
from runs.models import Command, CommandType, Run
from sessions.locks import lock_or_insert_session, lock_session
from sessions.models import ExecutionState, Session, title_from_text
from sessions.session_writes import pending_session_writes
from sessions.sql import update_session_columns
from sessions.versions import next_session_version


def check_boundary(session: Session, *, tenant_id: str, project_id: str, backend: str) -> None:
    """A session belongs to one tenant, project and backend: a run from another project or
    backend is a 409; from another tenant, the session does not exist for it (404)."""
    Scope.tenant(tenant_id).require(session, kind="session", object_id=session.session_id)
    mismatched = [
        name
        for name, mine, theirs in (
            ("project_id", session.project_id, project_id),
            ("backend_profile", session.backend_profile, backend),
        )
        if mine != theirs
    ]
    if mismatched:
        raise conflict(
            f"session {session.session_id} belongs to another {', '.join(mismatched)}",
            code="session_boundary",
            session_id=session.session_id,
            fields=mismatched,
        )


def ensure_session_for_run_locked(
    *,
    tenant_id: str,
    project_id: str,
    backend_profile: str,
    session_ref: dict[str, Any],
    session: Session | None = None,
) -> Session:
    """Create the run's session, or check the run fits it (seed `resolveSessionForRun`);
    return its row, locked. `session`: that row when the caller has locked it already."""
    session = session or _lock_session(session_ref["session_id"])
    if session is None:
        # Another run or turn may be creating the same session right now.
        session, inserted = lock_or_insert_session(
            _new_session(tenant_id, project_id, backend_profile, session_ref)
        )
        pending = pending_session_writes()
        if inserted and pending is not None:
            pending.inserted(session)
    check_boundary(session, tenant_id=tenant_id, project_id=project_id, backend=backend_profile)
    return session


def _new_session(
    tenant_id: str, project_id: str, backend_profile: str, session_ref: dict[str, Any]
) -> Session:
    now = timezone.now()
    metadata = session_ref.get("metadata") or {}
    return Session(
        session_id=session_ref["session_id"],
        tenant_id=tenant_id,
        project_id=project_id,
        backend_profile=backend_profile,
        conversation_id=session_ref.get("conversation_id"),
        thread_id=session_ref.get("thread_id"),
        metadata=metadata,
        expires_at=session_ref.get("expires_at"),
        version=next_session_version(),
        title=title_from_text(metadata.get("title")),
        last_activity_at=now,
        created_at=now,
        updated_at=now,
    )


def session_ref_of_run(session: Session, session_ref: dict[str, Any]) -> dict[str, Any]:
    """A new run's session_ref, completed from its session."""
    return {
        **session_ref,
        "conversation_id": session_ref.get("conversation_id") or session.conversation_id,
        "thread_id": session.thread_id or session_ref.get("thread_id"),
    }


def touch_session_for_run_locked(
    run: Run, *, bump: bool, session: Session | None = None, **changes: Any
) -> Session | None:
    """Apply `changes` to the run's session (seed `touchSessionForRun`). Needs the run lock;
    takes the session row lock, unless the caller passes the `session` it locked already;
    with `bump`, a new version."""
    if run.session_id is None:
        return None
    session = _locked_session_of(run, session)
    if session is None:
        return None
    now = timezone.now()
    # A change of execution state is always visible (a claim moving idle to running).
    bump = bump or changes.get("execution_state", session.execution_state) != (
        session.execution_state
    )
    if "title" in changes and (changes["title"] is None or session.title):
        changes.pop("title")  # the title comes from the first turn with text, and stays
    for name, value in changes.items():
        setattr(session, name, value)
    session.last_activity_at = changes.get("last_activity_at") or now
    session.updated_at = now
    _write_locked(session, [*changes, "last_activity_at", "updated_at"], bump=bump)
    return session


def _write_locked(session: Session, fields: list[str], *, bump: bool) -> None:
    """Write the changed `fields` of a locked row (with `bump`, and a new version): now, or
    at the end of the caller's `collecting_session_writes()` block."""
    pending = pending_session_writes()
    if pending is not None:
        pending.add(session, fields, bump=bump)
        return
    update_session_columns(session, fields, bump=bump)


def _lock_session(session_id: str) -> Session | None:
    """Lock a session row, unless this transaction's collector holds it already (then its
    instance, whose changes are not written yet)."""
    pending = pending_session_writes()
    collected = pending.row(session_id) if pending is not None else None
    return collected or lock_session(session_id)


def _locked_session_of(run: Run, session: Session | None) -> Session | None:
    """The run's session row: the one the caller locked, else locked here (None when the
    run has no session or the row does not exist)."""
    if session is not None:
        assert session.session_id == run.session_id, "the session of another run"
        return session
    return _lock_session(run.session_id) if run.session_id else None


def project_turn_started_locked(
    run: Run, *, command_id: str, text: Any, session: Session | None = None
) -> None:
    _show_turn_running_locked(
        run,
        session,
        command_id,
        active_command_id=command_id,
        terminal_status=None,
        failure_kind=None,
        title=title_from_text(text),
    )


def _show_turn_running_locked(
    run: Run, session: Session | None, command_id: str, **more: Any
) -> None:
    """The session shows `command_id` of `run` as its running turn (a new version): what a
    turn start and a steer of the current turn both write."""
    _show_run_running_locked(run, session, bump=True, last_command_id=command_id, **more)


def _show_run_running_locked(run: Run, session: Session | None, *, bump: bool, **more: Any) -> None:
    """The session shows `run` as its running, and latest, run."""
    touch_session_for_run_locked(
        run,
        bump=bump,
        session=session,
        execution_state=ExecutionState.RUNNING,
        last_run_id=run.id,
        active_run_id=run.id,
        **more,
    )


def project_claim_locked(run: Run) -> None:
    """A runner claimed the run: its session shows it running, if the run is the session's
    current turn. A claim of another run of the session (a runner re-claiming a run whose
    turn is over, after a newer turn was admitted) must not take the session over: it would
    point the session at one run and at another run's turn command, and admission would
    then refuse every turn (tests/soak found it). Needs the run lock."""
    session = _current_turn_session(run, None)
    if session is not None:
        _show_run_running_locked(run, session, bump=False)


def _current_turn_session(run: Run, session: Session | None) -> Session | None:
    """The run's session row if the run is its active turn, else None (decided under the
    session lock)."""
    session = _locked_session_of(run, session)
    return session if session is not None and session.active_run_id == run.id else None


def project_steer_locked(run: Run, *, command_id: str, session: Session | None = None) -> None:
    session = _current_turn_session(run, session)
    if session is None:
        return  # a steer sent straight to an older run of the session: see project_claim
    _show_turn_running_locked(run, session, command_id)


def project_turn_terminal_locked(
    run: Run,
    *,
    command_id: str | None,
    terminal_status: str,
    failure_kind: str | None,
    session: Session | None = None,
) -> None:
    """The session's turn is over: terminal, no active run or command."""
    changes: dict[str, Any] = {
        "execution_state": ExecutionState.TERMINAL,
        "active_run_id": None,
        "active_command_id": None,
        "last_run_id": run.id,
        "terminal_status": terminal_status,
        "failure_kind": failure_kind,
    }
    if command_id is not None:
        changes["last_command_id"] = command_id
    touch_session_for_run_locked(run, bump=True, session=session, **changes)


def project_command_terminal_locked(
    run: Run, command: Command, *, terminal_status: str, failure_kind: str | None
) -> None:
    """A command ended: a turn's end is its session's turn end (a steer or an interrupt
    ends no turn)."""
    if command.type == CommandType.TURN:
        project_turn_terminal_locked(
            run, command_id=command.id, terminal_status=terminal_status, failure_kind=failure_kind
        )


def project_run_terminal_locked(run: Run, *, session: Session | None = None) -> None:
    """A finished run moves its session to terminal only while it is still the session's
    current run (seed `finishRun`'s stillCurrent): a late finish of an old run must not
    clobber a newer turn. `session`: the run's session row if the caller locked it."""
    # Decide under the session lock: read unlocked, an admission committing a newer turn
    # in between would be overwritten.
    current = _locked_session_of(run, session)
    if current is None:
        return
    if current.active_run_id not in (None, run.id) or current.last_run_id not in (None, run.id):
        return
    project_turn_terminal_locked(
        run,
        command_id=None,
        terminal_status=run.status,
        failure_kind=run.failure_kind,
        session=current,
    )


def record_thread_locked(run: Run, *, thread_id: str, turn_id: str | None) -> dict[str, Any]:
    """Remember the backend thread a run reported, so the session's next run resumes it
    (seed `upsertSessionThread`). Returns the run's new session_ref; the caller saves it on
    the run and records the `session-updated` event."""
    session = _locked_session_of(run, None)
    if session is None:
        return dict(run.session_ref or {})
    metadata = {**session.metadata, **((run.session_ref or {}).get("metadata") or {})}
    if turn_id:
        metadata["last_turn_id"] = turn_id
    session.thread_id = thread_id
    session.metadata = metadata
    session.updated_at = session.last_activity_at = timezone.now()
    _write_locked(session, ["thread_id", "metadata", "updated_at", "last_activity_at"], bump=True)
    return {**(run.session_ref or {}), "thread_id": thread_id}
