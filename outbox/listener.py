"""Relay pickup woken by PostgreSQL in the Celery worker (issue 18 item 2).

Every event append sends `agentrun_run_change` after its commit (`runs.sql`), and with
the outbox on every appended event has its outbox record in that commit; so a worker
that consumes the outbox queue listens on that channel (`agentrun.pg_listen`: the
worker's one LISTEN connection, a drain thread of its own) and relays in-process, batch
after batch until one comes back short, with no broker message in between. No NOTIFY is
added for it: the run-change one is already sent, outside the append's transaction. The
on-commit Celery wake-up (`outbox.record`) still reaches workers that do not listen, and
the beat stays the safety net. On with the worker's LISTEN pickup
(`AGENTRUN_DISPATCH_LISTEN`) and the outbox.
"""

from __future__ import annotations

from agentrun import conf
from agentrun.pg_listen import WorkerDrain, register_worker_drain
from agentrun.task_queues import TASK_QUEUES, TaskName
from outbox.kafka import outbox_enabled
from outbox.services.relay import relay_outbox_batch
from runs.sql import RUN_CHANGE_CHANNEL


def drain_outbox() -> None:
    """Relay batches until one comes back short (what `outbox.relay_batch` runs)."""
    while relay_outbox_batch().claimed >= conf.outbox_batch_size():
        pass


def install() -> None:
    """Register the worker's relay drain (from `OutboxConfig.ready`)."""
    register_worker_drain(
        WorkerDrain(
            name="outbox relay",
            channel=RUN_CHANGE_CHANNEL,
            drain=drain_outbox,
            queue=TASK_QUEUES[TaskName.RELAY_BATCH].value,
            enabled=lambda: conf.dispatch_listen() and outbox_enabled(),
        )
    )
