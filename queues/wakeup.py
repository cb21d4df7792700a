"""Waking the scheduler when a task commits or a task's run ends (`agentrun.wakeup`)."""

from __future__ import annotations

from agentrun import conf
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker

_waker = Waker(
    task=TaskName.SCHEDULE_QUEUE,
    enabled=conf.queue_wake_on_commit,
)


def wake_scheduler() -> None:
    """Queue one scheduler batch; returns at once, never raises."""
    _waker.wake()
