"""Session versions: the session change feed (the protocol is in `agentrun.versions`)."""

from __future__ import annotations

from agentrun.versions import SESSION_VERSIONS


def next_session_version() -> int:
    return SESSION_VERSIONS.next_version()


def settle_feed() -> None:
    SESSION_VERSIONS.settle()
