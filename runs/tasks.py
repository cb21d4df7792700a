"""Celery tasks of the runs app: thin, bounded, named (the beat schedule is in
`agentrun/celery_schedule.py`)."""

from __future__ import annotations

from celery import shared_task

from agentrun import conf
from agentrun.task_queues import TaskName
from runs.services.approvals import expire_due_approvals


@shared_task(name=TaskName.EXPIRE_APPROVALS, ignore_result=True)
def expire_approvals_task() -> dict[str, int]:
    """Resolve one batch of pending approvals past their deadline as `expired`."""
    return {"expired": expire_due_approvals(limit=conf.maintenance_batch_size())}
