"""Row locks of the Agents API surface: a session's profile, after the session row (the
lock order of `runs/locks.py`: run → commands → session → profile)."""

from __future__ import annotations

from compat_openai.models import AgentSessionProfile


def lock_profile(session_id: str) -> AgentSessionProfile | None:
    """`SELECT … FOR UPDATE` the live (not deleted) profile of a session, or None."""
    rows = AgentSessionProfile.objects.select_for_update().filter(deleted_at__isnull=True)
    return rows.filter(pk=session_id).first()
