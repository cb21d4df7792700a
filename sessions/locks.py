"""Row locks of the sessions app. The session row comes after the run row and its
commands in the lock order (see runs/locks.py)."""

from __future__ import annotations

from sessions.models import Session


def lock_session(session_id: str) -> Session | None:
    """`SELECT … FOR UPDATE` the session, or None when it does not exist yet."""
    return Session.objects.select_for_update().filter(pk=session_id).first()
