"""Celery tasks of the outbox: thin wrappers over the services, each one bounded batch.

`outbox.relay_batch` runs on every commit that wrote outbox records (on-commit wake-up) and
from beat as the safety net; a full batch enqueues the next one, so a backlog (after a
broker outage, say) drains without waiting for beat. Safe on many workers at once: the
claim skips locked rows and every completion is fenced.
"""

from __future__ import annotations

from celery import shared_task

from agentrun import conf
from agentrun.task_queues import TaskName
from outbox.services.prune import prune_delivered_outbox
from outbox.services.relay import relay_outbox_batch


@shared_task(name=TaskName.RELAY_BATCH, ignore_result=True)
def relay_batch(trigger: str = "beat") -> dict[str, int]:
    """Relay one batch; enqueue another when this one was full. `trigger` says who asked
    (`commit` wake-ups, `beat`), for the worker's log."""
    result = relay_outbox_batch()
    if result.claimed >= conf.outbox_batch_size():
        relay_batch.delay()
    return result.as_dict()


@shared_task(name=TaskName.PRUNE_OUTBOX, ignore_result=True)
def prune() -> dict[str, int | bool]:
    """Delete up to 50 batches of delivered records past the retention period; enqueue
    another run when more are left, so pruning keeps up with any event rate."""
    result = prune_delivered_outbox(max_batches=50)
    if result.more:
        prune.delay()
    return result.as_dict()
