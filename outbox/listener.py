"""Relay pickup woken by PostgreSQL in the Celery worker (issue 18 item 2).

An append that wrote outbox records sends `agentrun_outbox_committed` after its commit,
in the same statement as its run-change notifications (`runs.sql.notify_runs_changed`,
no extra round trip); so a worker that consumes the outbox queue listens on that channel
(`agentrun.pg_listen`: the worker's one LISTEN connection, a drain thread of its own) and
relays in-process, batch after batch until one comes back short, with no broker message
in between. The
on-commit Celery wake-up (`outbox.record`) still reaches workers that do not listen, and
the beat stays the safety net. On with the worker's LISTEN pickup
(`AGENTRUN_DISPATCH_LISTEN`) and the outbox (`wanted`).
"""

from __future__ import annotations

from agentrun import conf
from agentrun.pg_listen import WorkerDrain, register_worker_drain
from agentrun.task_queues import TaskName
from outbox.kafka import outbox_enabled
from outbox.services.relay import relay_outbox_batch
from runs.sql import OUTBOX_COMMIT_CHANNEL


def _full_batch() -> bool:
    """One relay batch (what `outbox.relay_batch` runs); True when it claimed a whole one."""
    return relay_outbox_batch().claimed >= conf.outbox_batch_size()


DRAIN = WorkerDrain(
    name="outbox relay",
    channel=OUTBOX_COMMIT_CHANNEL,
    task=TaskName.RELAY_BATCH,
    full_batch=_full_batch,
    wanted=outbox_enabled,
)


def install() -> None:
    """Register the worker's relay drain (from `OutboxConfig.ready`)."""
    register_worker_drain(DRAIN)
