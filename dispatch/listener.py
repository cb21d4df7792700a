"""Dispatch pickup woken by PostgreSQL in the Celery worker (issue 18).

A worker that consumes the dispatch queue listens on `agentrun_dispatch`
(`agentrun.pg_listen`: one LISTEN connection per worker, a drain thread per channel): a
trigger on the intents table (migration 0004) sends the notification when intents are
inserted, and the listener runs `dispatch_batch` in-process until a batch comes back
short. The commit → claim path is then one notification, with no broker message and no
task queueing in between; the on-commit Celery wake-up (`dispatch.wakeup`) still reaches
workers that do not listen, and the beat stays the safety net.
`AGENTRUN_DISPATCH_LISTEN=false` turns it off. Batches it dispatches say `listen` in their
lease owner (and so in `runner-dispatched`).
"""

from __future__ import annotations

from agentrun import conf
from agentrun.leases import lease_owner
from agentrun.pg_listen import WorkerDrain, register_worker_drain
from agentrun.task_queues import TaskName
from dispatch.services.launch import dispatch_batch

DISPATCH_CHANNEL = "agentrun_dispatch"  # the trigger of migration 0004 notifies it


def _full_batch() -> bool:
    """One batch in the listener's thread (its lease owner says `listen`); True when it
    claimed a whole batch, so more may be due."""
    owner = lease_owner("dispatch", tag="listen")
    return dispatch_batch(owner=owner).claimed >= conf.dispatch_batch_size()


DRAIN = WorkerDrain(
    name="dispatch", channel=DISPATCH_CHANNEL, task=TaskName.DISPATCH_BATCH, full_batch=_full_batch
)


def install() -> None:
    """Register the worker's dispatch drain (from `DispatchConfig.ready`)."""
    register_worker_drain(DRAIN)
