"""The beat schedule: one entry per periodic task, each with why it runs that often.

Every periodic task runs one bounded batch, is safe on many workers at once (SKIP LOCKED,
fencing or a try-lock), and expires after about 1.5 times its interval so a slow worker never
builds a backlog of the same job. Prompt pickup comes from on-commit wake-ups; these
entries are the safety net.
"""

from __future__ import annotations

from typing import Any


def every(seconds: float, task: str, **options: Any) -> dict[str, Any]:
    return {"task": task, "schedule": seconds, "options": {"expires": seconds * 1.5, **options}}


BEAT_SCHEDULE: dict[str, dict[str, Any]] = {}
