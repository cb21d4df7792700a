"""Celery queue names, in one place (tasks name their queue; workers subscribe by name)."""

from __future__ import annotations

import enum


class TaskQueue(enum.StrEnum):
    DISPATCH = "dispatch"  # runner dispatch claims and launches
    OUTBOX = "outbox"  # Kafka relay batches
    MAINTENANCE = "maintenance"  # reapers, reconciliation, pruning, GC
    QUEUE = "queue"  # the work-queue scheduler and projector
