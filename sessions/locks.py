"""Row locks of the sessions app. The session row comes after the run row and its
commands in the lock order (see runs/locks.py)."""

from __future__ import annotations

from agentrun.raw_sql import read_models
from sessions.models import Session


def lock_session(session_id: str) -> Session | None:
    """`SELECT … FOR UPDATE` the session, or None when it does not exist yet. Raw
    (`agentrun.raw_sql.read_models`): every turn admission locks its session (bench cell 9)."""
    found = read_models(Session, "WHERE session_id = %s FOR UPDATE", [session_id])
    return found[0] if found else None


def lock_or_insert_session(new: Session) -> tuple[Session, bool]:
    """Lock the session `new` names, inserting `new` first if it is still absent; return
    it and whether this call inserted it. Two writers creating one session id do not
    collide: `INSERT … ON CONFLICT DO NOTHING` waits for the other's insert to commit,
    and the lock then reads the winner's row (whose version is not `new.version`).

    `new.version` is allocated before this call, so a creator may wait here while holding
    the shared feed lock (`sessions.versions`). That wait is only on another creator of
    the same row, which itself holds the shared lock already and never waits on this one,
    so the feed cannot deadlock on it."""
    Session.objects.bulk_create([new], ignore_conflicts=True)
    session = lock_session(new.session_id)
    assert session is not None, "a session row is never deleted while it is being created"
    return session, session.version == new.version
