"""Scheduler workers racing on the real database: each task starts exactly once, in
priority order within a worker's batches, and a queue's concurrency limit holds."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from agentrun.tenancy import Scope
from queues.models import QueueAttempt, QueueTask
from queues.services.scheduler import schedule_batch
from queues.services.tasks import cancel_task
from runs.models import Run
from tests.queues.helpers import file_task, finish, run_of
from tests.runs.threads import race

WORKERS = 4
TASKS = 500
BATCH = 25


def _worker() -> Callable[[], list[list[str]]]:
    """Run batches until one starts nothing; return the started ids of every batch."""

    def work() -> list[list[str]]:
        batches = []
        while True:
            started = schedule_batch(limit=BATCH).started
            if not started:
                return batches
            batches.append(started)

    return work


@pytest.mark.django_db(transaction=True)
def test_four_workers_start_500_tasks_each_exactly_once_in_priority_order_per_batch() -> None:
    priorities = [n % 10 for n in range(TASKS)]
    random.Random(4).shuffle(priorities)
    for n, priority in enumerate(priorities):
        file_task(priority=priority, title=f"task {n}")
    priority_of = dict(QueueTask.objects.values_list("id", "priority"))

    began = time.perf_counter()
    results = race([_worker() for _ in range(WORKERS)])
    elapsed = time.perf_counter() - began

    assert not [r for r in results if isinstance(r, Exception)], results
    batches = [batch for worker in results for batch in worker]
    started = [task_id for batch in batches for task_id in batch]
    assert len(started) == TASKS and set(started) == set(priority_of)  # each exactly once
    for batch in batches:
        ranks = [priority_of[task_id] for task_id in batch]
        assert ranks == sorted(ranks, reverse=True), f"batch out of priority order: {ranks}"
    assert all(len(worker) > 0 for worker in results), "a worker started nothing"
    attempts = Counter(QueueAttempt.objects.values_list("task_id", flat=True))
    assert attempts == Counter(list(priority_of))  # one attempt (retry index 0) per task
    assert QueueTask.objects.filter(state="running").count() == TASKS
    runs = Run.objects.filter(trace_sink__task_id__isnull=False)
    assert runs.count() == TASKS
    assert {r.trace_sink["task_id"] for r in runs} == set(priority_of)
    per_worker = [sum(len(b) for b in worker) for worker in results]
    print(
        f"\nscheduler: {TASKS} tasks by {WORKERS} workers in {elapsed:.2f} s "
        f"= {TASKS / elapsed:.0f} tasks/s; per worker {per_worker}"
    )


@pytest.mark.django_db(transaction=True)
def test_a_queue_concurrency_limit_is_never_exceeded_by_racing_workers(
    settings: SettingsWrapper,
) -> None:
    settings.AGENTRUN_QUEUE_CONCURRENCY = {"limited": 3}
    for n in range(24):
        file_task(queue="limited", priority=n % 3, title=f"limited {n}")
        file_task(queue="open", title=f"open {n}")

    results = race([_worker() for _ in range(WORKERS)])

    assert not [r for r in results if isinstance(r, Exception)], results
    running = Counter(QueueTask.objects.filter(state="running").values_list("queue", flat=True))
    assert running == {"limited": 3, "open": 24}
    limited = QueueTask.objects.filter(queue="limited", state="running")
    assert sorted(limited.values_list("priority", flat=True)) == [2, 2, 2]

    finish(run_of(limited.first().id))  # one slot frees up
    again = race([_worker() for _ in range(WORKERS)])

    assert sum(len(b) for worker in again for b in worker) == 1
    assert QueueTask.objects.filter(queue="limited", state="running").count() == 3
    assert QueueTask.objects.filter(queue="limited", state="completed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_cancels_racing_the_scheduler_leave_every_task_and_its_run_cancelled() -> None:
    filed = [file_task(title=f"t{n}", priority=n % 4).id for n in range(40)]

    def cancel_all(order: list[str]) -> Callable[[], int]:
        def work() -> int:
            return sum(
                cancel_task(
                    task_id=task_id, scope=Scope.tenant("tenant-a"), reason="racing"
                ).changed
                for task_id in order
            )

        return work

    workers = [_worker(), _worker(), cancel_all(filed), cancel_all(filed[::-1])]
    results = race(workers)

    assert not [r for r in results if isinstance(r, Exception)], results
    assert results[2] + results[3] == len(filed)  # each task cancelled by exactly one call
    assert set(QueueTask.objects.values_list("state", flat=True)) == {"cancelled"}
    started = Run.objects.filter(trace_sink__task_id__in=filed)
    assert set(started.values_list("status", flat=True)) <= {"cancelled"}
    assert not QueueAttempt.objects.exclude(state="cancelled").exists()
    print(f"\ncancel race: {started.count()} of {len(filed)} tasks had started a run")
