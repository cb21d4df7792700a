"""Stats (counts by state and lane, oldest pending age) and the commander snapshot (the
tasks that most need a reader's attention)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues.models import QueueTask
from tests.builders import key_client
from tests.queues.helpers import call, file_task, finish, run_of, schedule

pytestmark = pytest.mark.django_db


def _backlog() -> dict[str, QueueTask]:
    """One task per state of interest, in queue `ops`."""
    tasks = {
        name: file_task(queue="ops", title=name, priority=p, lane=lane)
        for name, p, lane in [
            ("failed", 1, "a"),
            ("blocked", 2, "a"),
            ("done", 3, "b"),
            ("running", 4, "b"),
            ("read-failure", 5, "a"),
        ]
    }
    assert len(schedule().started) == 5
    finish(run_of(tasks["failed"].id), status="failed", failure_kind="backend-failed")
    finish(run_of(tasks["blocked"].id), status="blocked")
    finish(run_of(tasks["done"].id))
    finish(run_of(tasks["read-failure"].id), status="failed")
    tasks["pending-low"] = file_task(queue="ops", title="pending-low", priority=0, lane="b")
    tasks["pending-high"] = file_task(queue="ops", title="pending-high", priority=7, lane="b")
    file_task(queue="elsewhere", title="not in ops")
    return tasks


def test_stats_count_by_state_and_lane_and_age_the_oldest_pending_task() -> None:
    tasks = _backlog()
    hour_ago = timezone.now() - timedelta(hours=1)
    QueueTask.objects.filter(pk=tasks["pending-low"].id).update(created_at=hour_ago)
    stats = call(key_client(role="client"), "GET", "/queue/stats?queue=ops").json()
    assert stats["queue"] == "ops" and stats["total"] == 7
    assert stats["by_state"] == {
        "pending": 2,
        "running": 1,
        "completed": 1,
        "failed": 2,
        "blocked": 1,
        "cancelled": 0,
    }
    assert stats["by_lane"] == {
        "a": {"total": 3, "failed": 2, "blocked": 1},
        "b": {"total": 4, "completed": 1, "running": 1, "pending": 2},
    }
    assert 3590 < stats["oldest_pending_age_seconds"] < 3700
    everything = call(key_client(role="client"), "GET", "/queue/stats").json()
    assert (everything["queue"], everything["total"]) == (None, 8)
    theirs = call(key_client(role="client", tenant_id="tenant-b"), "GET", "/queue/stats").json()
    assert theirs["total"] == 0 and theirs["oldest_pending_age_seconds"] is None


def test_the_commander_shows_unread_failures_then_running_then_pending_by_priority() -> None:
    tasks = _backlog()
    api = key_client(role="client")
    call(api, "POST", f"/queue/tasks/{tasks['read-failure'].id}/read", {"reader_id": "lead"})
    snapshot = call(api, "GET", "/queue/commander?queue=ops&reader_id=lead").json()
    titles = [item["title"] for item in snapshot["items"]]
    assert titles == ["blocked", "failed", "running", "pending-high", "pending-low"]
    assert all(item["unread"] is True for item in snapshot["items"][:2])
    assert (snapshot["queue"], snapshot["reader_id"]) == ("ops", "lead")
    assert snapshot["stats"]["by_state"]["failed"] == 2

    anyone = call(api, "GET", "/queue/commander?queue=ops").json()  # every failure is unread
    assert [i["title"] for i in anyone["items"]][:3] == ["read-failure", "blocked", "failed"]


def test_the_commander_shows_at_most_twenty_tasks() -> None:
    for n in range(25):
        file_task(title=f"t{n}", priority=n)
    items = call(key_client(role="client"), "GET", "/queue/commander").json()["items"]
    assert [i["priority"] for i in items] == list(range(24, 4, -1))
