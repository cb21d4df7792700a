"""Worker and beat liveness in the status: a fresh heartbeat is live, an old one is not,
and `agentrun_status` prints both with when each last ran a task."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from ops.heartbeats import HeartbeatWriter, liveness
from ops.models import ProcessHeartbeat, ProcessKind
from ops.status import collect_status, status_text

pytestmark = pytest.mark.django_db


def test_a_written_heartbeat_is_live_and_an_old_one_is_not(settings) -> None:
    settings.AGENTRUN_HEARTBEAT_STALE_S = 10
    worker = HeartbeatWriter(ProcessKind.WORKER)
    worker.last_task_at = timezone.now()
    worker.write()
    ProcessHeartbeat.objects.create(
        name=ProcessKind.BEAT, hostname="h", pid=1,
        started_at=timezone.now() - timedelta(minutes=5),
        beat_at=timezone.now() - timedelta(seconds=30),
    )  # fmt: skip
    state = liveness()
    assert state["worker"]["ok"] and state["worker"]["live_count"] == 1
    assert state["worker"]["last_task_at"] == worker.last_task_at
    assert not state["beat"]["ok"] and state["beat"]["age_seconds"] >= 30
    text = status_text(collect_status())
    assert "worker    live: 1 live" in text and "beat      NOT LIVE: 0 live" in text
