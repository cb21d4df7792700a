"""Celery tasks of runner dispatch: thin, bounded, named (the beat schedule is in
`agentrun/celery_schedule.py`). Each runs one bounded batch of a service and returns its
counts; each is safe on many workers at once (SKIP LOCKED claims, fenced settles,
per-run locks), so no leader is needed.
"""

from __future__ import annotations

import time

from celery import shared_task

from agentrun import conf
from agentrun.leases import lease_owner
from agentrun.pg_listen import listening_on
from agentrun.task_queues import TaskName
from dispatch.listener import DISPATCH_CHANNEL
from dispatch.services.launch import DispatchCounts, dispatch_batch
from dispatch.services.reconcile import reconcile_runner_jobs
from dispatch.wakeup import continue_dispatch
from runs.services.reaper import reap_expired_leases

# How long one dispatch task keeps running the follow-ups of its full batches in-process
# before it hands the burst back to the broker (one `continue` message). A follow-up
# through the broker was a publish, a delivery and an acknowledgement (a Redis
# transaction in the worker's consumer thread) between two batches: the pool threads sat
# idle for a third of a Celery drain (bench cell 3, py-spy). Bounded, so a task still
# ends and its thread takes the queue's other messages at least this often.
FOLLOW_UP_BUDGET_S = 1.0


@shared_task(name=TaskName.DISPATCH_BATCH, ignore_result=True)
def dispatch_batch_task(trigger: str = "beat") -> dict[str, int]:
    """Claim and dispatch a batch, and the follow-ups of a full one. `trigger` (`commit`
    or `beat`) is recorded in the lease owner, and so in the `runner-dispatched` event,
    for operators (and tests). A full batch is followed by another (lease owner
    `continue`), in this task while `FOLLOW_UP_BUDGET_S` lasts, then through the broker:
    a burst drains without waiting for beat, with as many batches in flight as began it.
    Returns the batches' counts, summed.

    A worker whose listener holds its LISTEN leaves a `commit` wake-up to it: the same
    commit's notification woke the listener, which drains until a batch comes back short,
    and a claim here would only race it for the same rows on a fresh connection (bench
    cell 4, deployed: p50 15.3 / 16.2 ms with these claims, 12.2 / 12.2 without). The cost:
    a notification lost on a connection that died unnoticed waits for the beat (5 s)."""
    if trigger == "commit" and listening_on(DISPATCH_CHANNEL):
        return DispatchCounts().as_dict()
    counts = dispatch_batch(owner=lease_owner("dispatch", tag=trigger))
    total = counts.as_dict()
    deadline = time.monotonic() + FOLLOW_UP_BUDGET_S
    while counts.claimed >= conf.dispatch_batch_size():
        if time.monotonic() >= deadline:
            continue_dispatch()  # the rest of the burst, through the broker
            break
        counts = dispatch_batch(owner=lease_owner("dispatch", tag="continue"))
        total = {name: total[name] + value for name, value in counts.as_dict().items()}
    return total


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
