"""Fault: a Celery dispatch worker SIGKILLed mid-batch, after it launched runners and before
it recorded them.

The worker claims a batch of intents, launches a real reference runner per intent (the
local launcher) and then blocks completing them, on a run row this test holds locked: that
is the moment it is killed. Its uncommitted completion dies with it; its runners are
already running. After the dispatch lease lapses a second worker claims the intents again
(attempt 2), launches again and records each intent's one runner job. The runs complete
once each: the second runner (same planned runner id) takes the claim over with a new lease
epoch and the first one's later writes are refused and recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from agentrun.models import ApiKey
from agentrun.task_queues import TaskName
from dispatch.models import RunnerDispatchIntent
from runs.models import Event, Run, RunnerJob
from runs.services.command_lifecycle import create_command
from tests.builders import make_run
from tests.faults.harness import (
    REDIS_DISPATCH,
    celery_worker,
    purge,
    raw_connection,
    send_task,
    wait_for,
    waiting_on_lock,
)
from tests.faults.invariants import assert_invariants

pytestmark = pytest.mark.django_db(transaction=True)
RUNS = 3
LONG_TURN = {"mode": "long", "ticks": 25, "tick_ms": 200}  # 5 s: outlives the first worker


def _dispatch_commands() -> list[str]:
    runs = [make_run(tenant_id="tenant-f1") for _ in range(RUNS)]
    for run in runs:
        create_command(
            run_id=run.id,
            type="turn",
            payload={"text": "go", "scripted": LONG_TURN},
            dispatch={},
        )
    return sorted(run.id for run in runs)


def _worker_env(live_server: Any) -> dict[str, str]:
    return {
        "AGENTRUN_API_URL": live_server.url,
        "AGENTRUN_LOCAL_RUNNER_COMMAND": "",
        "AGENTRUN_DISPATCH_LEASE_MS": "3000",
    }


def test_worker_killed_mid_dispatch_batch(live_server: Any, tmp_path: Path) -> None:
    run_ids = _dispatch_commands()
    purge(REDIS_DISPATCH)
    blocker = raw_connection("fault-f1-blocker")
    blocker.execute("BEGIN")
    blocker.execute("SELECT 1 FROM agentrun_runs WHERE id = %s FOR UPDATE", [run_ids[0]])
    env = _worker_env(live_server)
    with celery_worker(
        "dispatch-a", queues="dispatch", broker=REDIS_DISPATCH, data_dir=tmp_path, **env
    ) as first:
        send_task(REDIS_DISPATCH, TaskName.DISPATCH_BATCH, "dispatch", trigger="commit")
        keys = ApiKey.objects.filter(name__startswith="runner job")
        wait_for(lambda: keys.count() == RUNS, 30, "the first worker to launch every runner")
        wait_for(lambda: waiting_on_lock(first.app_name), 30, "the completion to block")
        first.kill()  # mid-batch: launched, not recorded
    blocker.rollback()
    blocker.close()
    intents = RunnerDispatchIntent.objects.filter(run_id__in=run_ids)
    assert [i.state for i in intents] == ["dispatching"] * RUNS
    assert not RunnerJob.objects.exists(), "the dead worker's completion was committed"

    with celery_worker(
        "dispatch-b", queues="dispatch", broker=REDIS_DISPATCH, data_dir=tmp_path, **env
    ):
        wait_for(_leases_lapsed, 10, "the dead worker's dispatch leases to lapse", 0.1)
        send_task(REDIS_DISPATCH, TaskName.DISPATCH_BATCH, "dispatch", trigger="beat")
        wait_for(lambda: _all_terminal(run_ids), 90, "every run to finish", 0.2)

    _assert_dispatched_once(run_ids)
    assert_invariants()


def _leases_lapsed() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM agentrun_runner_dispatch_intents "
            "WHERE state = 'dispatching' AND lease_expires_at > now()"
        )
        return int(cursor.fetchone()[0]) == 0


def _all_terminal(run_ids: list[str]) -> bool:
    return not Run.objects.filter(
        id__in=run_ids, status__in=["pending", "claimed", "running"]
    ).exists()


def _assert_dispatched_once(run_ids: list[str]) -> None:
    runs = Run.objects.filter(id__in=run_ids)
    outcome = {
        run.id: (
            run.status,
            RunnerJob.objects.filter(run=run).count(),
            Event.objects.filter(run=run, payload__phase="runner-dispatched").count(),
        )
        for run in runs
    }
    print(f"\nruns after the kill and re-dispatch: {outcome}")
    for intent in RunnerDispatchIntent.objects.filter(run_id__in=run_ids):
        if intent.state == "dispatched":  # re-dispatched: attempt 2 recorded the one job
            assert intent.attempt_count == 2
            assert RunnerJob.objects.filter(run_id=intent.run_id).count() == 1
        else:  # the first runner finished the run before the lease lapsed
            assert intent.state == "cancelled"
    assert all(status == "completed" for status, _, _ in outcome.values())
    refused = Event.objects.filter(run_id__in=run_ids, payload__phase="late-write-rejected")
    print(f"late writes of superseded runners refused and recorded: {refused.count()}")
