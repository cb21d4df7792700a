"""Waking the dispatcher when an intent commits (`agentrun.wakeup` says how and why)."""

from __future__ import annotations

from agentrun import conf
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker

_waker = Waker(
    task=TaskName.DISPATCH_BATCH,
    enabled=conf.dispatch_wake_on_commit,
)


def wake_dispatcher() -> None:
    """Queue one dispatch batch; returns at once, never raises."""
    _waker.wake()


def continue_dispatch() -> None:
    """From a dispatch task whose batch came back full: one more batch (not coalesced)."""
    _waker.continue_burst()
