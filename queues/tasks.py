"""Celery tasks of the work queue: thin, bounded, named (the beat entry is in
`agentrun/celery_schedule.py`). Safe on many workers at once: the scheduler claims with
SKIP LOCKED and takes each limited queue's slot lock; the reconciliation locks run, then
task, one at a time.
"""

from __future__ import annotations

from celery import shared_task

from agentrun import conf
from agentrun.task_queues import TaskName
from queues.services.scheduler import scheduler_pass


@shared_task(name=TaskName.SCHEDULE_QUEUE, ignore_result=True)
def schedule_batch_task(trigger: str = "beat") -> dict[str, int]:
    """Start one batch of pending tasks and project ended runs (`scheduler_pass`).
    `trigger` (`commit` or `beat`) only tells the worker log why it ran."""
    return scheduler_pass(limit=conf.queue_batch_size())
