"""Celery queue names and the routing of every task to one of them, in one place.

Workers subscribe by queue name (`celery -A agentrun worker -Q dispatch,maintenance`);
`TASK_ROUTES` (the `task_routes` setting) sends each task, by its name, to its queue.
"""

from __future__ import annotations

import enum


class TaskQueue(enum.StrEnum):
    DISPATCH = "dispatch"  # runner dispatch claims and launches
    OUTBOX = "outbox"  # Kafka relay batches
    MAINTENANCE = "maintenance"  # reapers, reconciliation, pruning, GC
    QUEUE = "queue"  # the work-queue scheduler and projector


TASK_ROUTES: dict[str, dict[str, str]] = {
    "dispatch.dispatch_batch": {"queue": TaskQueue.DISPATCH.value},
    "outbox.relay_batch": {"queue": TaskQueue.OUTBOX.value},
    "queue.schedule_batch": {"queue": TaskQueue.QUEUE.value},
    "dispatch.reap_leases": {"queue": TaskQueue.MAINTENANCE.value},
    "dispatch.reconcile_runner_jobs": {"queue": TaskQueue.MAINTENANCE.value},
    "outbox.prune": {"queue": TaskQueue.MAINTENANCE.value},
    "agentrun.doctor_report": {"queue": TaskQueue.MAINTENANCE.value},
}
