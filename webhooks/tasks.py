"""Celery tasks of the webhooks app: thin wrappers over the relay service.

`webhooks.relay_batch` runs on every commit that wrote deliveries (on-commit wake-up) and
from beat as the safety net (retries coming due); a batch that was full, or that left a
key with more due, enqueues the next. Safe on many workers at once: the claim skips locked
rows and every settle is fenced.
"""

from __future__ import annotations

from celery import shared_task

from agentrun.task_queues import TaskName
from webhooks.services.relay import relay_webhook_batch


@shared_task(name=TaskName.WEBHOOK_RELAY_BATCH, ignore_result=True)
def relay_batch(trigger: str = "beat") -> dict[str, int | bool]:
    """Send one batch; enqueue another when there is more. `trigger` says who asked."""
    result = relay_webhook_batch()
    if result.more:
        relay_batch.delay()
    return result.as_dict()
