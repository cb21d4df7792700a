"""Task versions: the work queue's change feed (the protocol is in `agentrun.versions`)."""

from __future__ import annotations

from agentrun.versions import QUEUE_VERSIONS


def next_queue_version() -> int:
    return QUEUE_VERSIONS.next_version()


def settle_feed() -> None:
    QUEUE_VERSIONS.settle()
