"""Fault: a Celery queue worker SIGKILLed mid-scheduling-batch.

The scheduler starts each pending task in its own transaction (claim with SKIP LOCKED, new
run and turn command, `running` attempt, task version). The worker is killed while a batch
of 120 tasks is half done: every task it started is whole (attempt, run and command), the
one in flight rolled back with the connection, none is half-written. A second worker starts
the rest: each task exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun.task_queues import TaskName
from queues.models import QueueAttempt, QueueTask
from queues.services.tasks import TaskSpec, create_task
from runs.models import Command, Run
from tests.faults.harness import REDIS_QUEUE, celery_worker, purge, send_task, wait_for
from tests.faults.invariants import assert_invariants

pytestmark = pytest.mark.django_db(transaction=True)
TASKS = 120


def _file_tasks() -> None:
    for number in range(TASKS):
        create_task(
            tenant_id="tenant-f3",
            spec=TaskSpec(
                project_id="proj-1",
                queue="default",
                lane="default",
                title=f"task {number}",
                priority=number % 3,
                backend_profile="scripted",
                provider_id="openai",
                workspace_ref={"path": "/work/repo"},
                payload={"text": f"task {number}"},
                dispatch=None,
            ),
        )


def _running() -> int:
    return QueueTask.objects.filter(state="running").count()


def _started_whole() -> None:
    """Every started task has one running attempt whose run has its turn command."""
    for task in QueueTask.objects.filter(state="running"):
        attempts = list(QueueAttempt.objects.filter(task=task))
        assert [a.state for a in attempts] == ["running"], task.id
        assert Command.objects.filter(run_id=attempts[0].run_id, type="turn").count() == 1
    orphans = Run.objects.exclude(id__in=QueueAttempt.objects.values("run_id"))
    assert not orphans.exists(), "a run without its attempt was committed"


def test_worker_killed_mid_queue_scheduling(tmp_path: Path) -> None:
    _file_tasks()
    purge(REDIS_QUEUE)
    env = {"AGENTRUN_QUEUE_BATCH_SIZE": str(TASKS), "AGENTRUN_QUEUE_WAKE_ON_COMMIT": "false"}
    with celery_worker(
        "queue-a", queues="queue", broker=REDIS_QUEUE, data_dir=tmp_path, **env
    ) as first:
        send_task(REDIS_QUEUE, TaskName.SCHEDULE_QUEUE, "queue", trigger="commit")
        wait_for(lambda: _running() >= TASKS // 4, 60, "a quarter of the batch to start")
        first.kill()
    at_kill = _running()
    print(f"\nscheduler killed after starting {at_kill} of {TASKS} tasks")
    assert 0 < at_kill < TASKS, "the kill did not land mid-batch"
    _started_whole()

    with celery_worker("queue-b", queues="queue", broker=REDIS_QUEUE, data_dir=tmp_path, **env):
        send_task(REDIS_QUEUE, TaskName.SCHEDULE_QUEUE, "queue", trigger="beat")
        wait_for(lambda: _running() == TASKS, 90, "every task to start", 0.1)
    _started_whole()
    assert QueueAttempt.objects.count() == TASKS == Run.objects.count()
    assert_invariants(reap=False)
