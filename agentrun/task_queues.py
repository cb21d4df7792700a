"""Celery task names, queue names and the routing of every task to one of them, in one place.

`TaskName` is the one spelling of each task's name: the `@shared_task` decorators, the
route table, the beat schedule and the on-commit wakers all say `TaskName.X`, so a task
cannot be renamed in one place and missed in another (a beat entry or a wake-up for a name
no worker knows is dropped silently). The values are the wire names already in queues and
beat schedules; changing one is a migration of deployed brokers, not a refactor.

Workers subscribe by queue name (`celery -A agentrun worker -Q dispatch,maintenance`);
`TASK_QUEUES` sends each task to its queue, and `TASK_ROUTES` is that table in the shape of
Celery's `task_routes` setting.
"""

from __future__ import annotations

import enum


class TaskQueue(enum.StrEnum):
    DISPATCH = "dispatch"  # runner dispatch claims and launches
    OUTBOX = "outbox"  # Kafka relay batches
    MAINTENANCE = "maintenance"  # reapers, reconciliation, pruning, GC
    QUEUE = "queue"  # the work-queue scheduler and projector
    WEBHOOKS = "webhooks"  # webhook relay batches (remote HTTP: kept off the Kafka relay)


class TaskName(enum.StrEnum):
    DISPATCH_BATCH = "dispatch.dispatch_batch"
    REAP_LEASES = "dispatch.reap_leases"
    RECONCILE_RUNNER_JOBS = "dispatch.reconcile_runner_jobs"
    RELAY_BATCH = "outbox.relay_batch"
    PRUNE_OUTBOX = "outbox.prune"
    WEBHOOK_RELAY_BATCH = "webhooks.relay_batch"
    SCHEDULE_QUEUE = "queue.schedule_batch"
    DOCTOR_REPORT = "agentrun.doctor_report"
    EXPIRE_APPROVALS = "runs.expire_approvals"


TASK_QUEUES: dict[TaskName, TaskQueue] = {
    TaskName.DISPATCH_BATCH: TaskQueue.DISPATCH,
    TaskName.RELAY_BATCH: TaskQueue.OUTBOX,
    TaskName.SCHEDULE_QUEUE: TaskQueue.QUEUE,
    TaskName.REAP_LEASES: TaskQueue.MAINTENANCE,
    TaskName.RECONCILE_RUNNER_JOBS: TaskQueue.MAINTENANCE,
    TaskName.PRUNE_OUTBOX: TaskQueue.MAINTENANCE,
    TaskName.WEBHOOK_RELAY_BATCH: TaskQueue.WEBHOOKS,
    TaskName.DOCTOR_REPORT: TaskQueue.MAINTENANCE,
    TaskName.EXPIRE_APPROVALS: TaskQueue.MAINTENANCE,
}

# Plain strings: Celery matches a message's task name against these keys.
TASK_ROUTES: dict[str, dict[str, str]] = {
    name.value: {"queue": queue.value} for name, queue in TASK_QUEUES.items()
}
