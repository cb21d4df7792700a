"""Waking the dispatcher when an intent commits (`agentrun.wakeup` says how and why).

Two wakers, told apart by their trigger: `commit` for new intents, whose INSERT also
notifies every listening worker (the trigger of migration 0004, `dispatch.listener`), and
`due` for an existing intent made due again (retry now, relaunch), an UPDATE that no
trigger announces. A listening worker leaves `commit` wake-ups to its listener
(`dispatch.tasks`); `due` ones it always runs.
"""

from __future__ import annotations

from agentrun import conf
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker

_waker = Waker(
    task=TaskName.DISPATCH_BATCH,
    enabled=conf.dispatch_wake_on_commit,
)
_due_waker = Waker(
    task=TaskName.DISPATCH_BATCH,
    enabled=conf.dispatch_wake_on_commit,
    trigger="due",
)


def wake_dispatcher() -> None:
    """Queue one dispatch batch for new intents; returns at once, never raises."""
    _waker.wake()


def wake_dispatcher_for_due() -> None:
    """Queue one dispatch batch for an existing intent made due again (no NOTIFY)."""
    _due_waker.wake()


def continue_dispatch() -> None:
    """From a dispatch task whose batch came back full: one more batch (not coalesced)."""
    _waker.continue_burst()
