"""Dispatch pickup woken by PostgreSQL in the Celery worker (issue 18).

A worker that consumes the dispatch queue starts one `agentrun.pg_listen.ChannelListener`
at `worker_ready`: a trigger on the intents table (migration 0003) sends `NOTIFY
agentrun_dispatch` when intents are inserted, and the listener runs `dispatch_batch`
in-process until a batch comes back short. The commit → claim path is then one
notification, with no broker message and no task queueing in between; the on-commit
Celery wake-up (`dispatch.wakeup`) still reaches workers that do not listen, and the
beat stays the safety net. `AGENTRUN_DISPATCH_LISTEN=false` turns it off. Batches it
dispatches say `listen` in their lease owner (and so in `runner-dispatched`).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from agentrun import conf
from agentrun.leases import lease_owner
from agentrun.pg_listen import ChannelListener
from agentrun.task_queues import TASK_QUEUES, TaskName
from dispatch.services.launch import dispatch_batch

DISPATCH_CHANNEL = "agentrun_dispatch"  # the trigger of migration 0003 notifies it
log = logging.getLogger("agentrun.dispatch")
_listener: ChannelListener | None = None


def drain_due_intents() -> None:
    """Dispatch batches until one comes back short (the backlog is drained)."""
    while dispatch_batch(owner=lease_owner("dispatch", tag="listen")).claimed >= (
        conf.dispatch_batch_size()
    ):
        pass


def _consumes_dispatch(consumer: Any) -> bool:
    """Whether this worker takes dispatch tasks (`-Q` names the dispatch queue)."""
    wanted = TASK_QUEUES[TaskName.DISPATCH_BATCH].value
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None) or []
    return any(queue.name == wanted for queue in queues)


def _on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    global _listener
    if _listener is not None or not conf.dispatch_listen() or not _consumes_dispatch(sender):
        return
    _listener = ChannelListener(
        channel=DISPATCH_CHANNEL, drain=drain_due_intents, name="agentrun-dispatch-listener"
    )
    _listener.start()
    log.info("dispatch listener started", extra={"channel": DISPATCH_CHANNEL})


def _on_worker_shutdown(**kwargs: Any) -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


def install() -> None:
    """Connect the worker signals (from `DispatchConfig.ready`)."""
    signals.worker_ready.connect(_on_worker_ready, weak=False)
    signals.worker_shutdown.connect(_on_worker_shutdown, weak=False)
