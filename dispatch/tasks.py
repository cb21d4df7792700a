"""Celery tasks of runner dispatch: thin, bounded, named (the beat schedule is in
`agentrun/celery_schedule.py`). Each runs one bounded batch of a service and returns its
counts; each is safe on many workers at once (SKIP LOCKED claims, fenced settles,
per-run locks), so no leader is needed.
"""

from __future__ import annotations

from celery import shared_task

from agentrun import conf
from agentrun.leases import lease_owner
from agentrun.task_queues import TaskName
from dispatch.services.launch import dispatch_batch
from dispatch.services.reconcile import reconcile_runner_jobs
from dispatch.wakeup import continue_dispatch
from runs.services.reaper import reap_expired_leases


@shared_task(name=TaskName.DISPATCH_BATCH, ignore_result=True)
def dispatch_batch_task(trigger: str = "beat") -> dict[str, int]:
    """Claim and dispatch one batch. `trigger` (`commit` or `beat`) is recorded in the
    lease owner, and so in the `runner-dispatched` event, for operators (and tests). A
    full batch queues its follow-up, so a burst drains without waiting for beat, with as
    many batches in flight as began it."""
    counts = dispatch_batch(owner=lease_owner("dispatch", tag=trigger))
    if counts.claimed >= conf.dispatch_batch_size():
        continue_dispatch()
    return counts.as_dict()


@shared_task(name=TaskName.REAP_LEASES, ignore_result=True)
def reap_leases_task() -> dict[str, int]:
    return reap_expired_leases(
        limit=conf.maintenance_batch_size(), grace_ms=conf.lease_reap_grace_ms()
    ).as_dict()


@shared_task(name=TaskName.RECONCILE_RUNNER_JOBS, ignore_result=True)
def reconcile_runner_jobs_task() -> dict[str, int]:
    return reconcile_runner_jobs(
        limit=conf.maintenance_batch_size(), grace_ms=conf.reconcile_grace_ms()
    ).as_dict()
