"""Supervision: SIGKILL the worker, then beat, under `manage.py up`.

For each: `/readyz` turns not ready (naming the dead one) within its heartbeat's stale
limit, the supervisor logs the death at ERROR and restarts it, `/readyz` is ready again,
and nothing accepted is lost: a turn filed just before the kill and one filed while the
worker was down both complete. Recovery times are printed (the figures belong to the
report, not to assertions; the deadlines here only stop a hung test).

The dispatch lease is 5 s here (60 s by default) so that a batch the dead worker had
claimed is claimed again quickly; that is the reaping path, not a shortcut.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.e2e.up_process import Api, UpProcess, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
INTERVAL_S, STALE_S = 1.0, 2.0
MARGIN_S = 15.0  # a loaded 2-core machine: deadlines only, never asserted as figures


def _test_database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    process = UpProcess(
        tmp_path,
        {
            "DATABASE_URL": _test_database_url(),
            "AGENTRUN_HEARTBEAT_INTERVAL_S": str(INTERVAL_S),
            "AGENTRUN_HEARTBEAT_STALE_S": str(STALE_S),
            "AGENTRUN_DISPATCH_LEASE_MS": "5000",
            # A worker restarts in about a second: the restart waits past the stale limit,
            # so /readyz has a window in which it must report the death.
            "AGENTRUN_SUPERVISOR_RESTART_BASE_S": str(STALE_S + 1.5),
        },
    )
    try:
        yield process.start()
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def _kill(up: UpProcess, name: str) -> tuple[int, float]:
    pid = int(up.state()[name]["pid"])
    os.kill(pid, signal.SIGKILL)
    return pid, time.monotonic()


def _not_ready_because(up: UpProcess, name: str) -> bool:
    status, body = up.readiness()
    return status == 503 and body["checks"][name]["ok"] is False


def _restarted(up: UpProcess, name: str, old_pid: int) -> bool:
    child = up.state()[name]
    return child["restarts"] == 1 and child["pid"] not in (None, old_pid)


def test_a_killed_worker_is_restarted_and_loses_nothing(up: UpProcess) -> None:
    api = Api(up.url, up.client_key())
    before = api.turn("sup-before", "filed before the kill")
    pid, killed_at = _kill(up, "worker")
    wait_for(lambda: _not_ready_because(up, "worker"), STALE_S + MARGIN_S, "not ready")
    print(f"worker: not ready {time.monotonic() - killed_at:.1f} s after SIGKILL")
    during = api.turn("sup-during", "filed while the worker is down")
    wait_for(lambda: _restarted(up, "worker", pid), MARGIN_S, "the worker's restart")
    wait_for(lambda: up.readiness()[0] == 200, 60, "ready again")
    print(f"worker: ready again {time.monotonic() - killed_at:.1f} s after SIGKILL")
    statuses = api.wait_terminal([before, during], timeout=120)
    print(f"worker: both turns completed {time.monotonic() - killed_at:.1f} s after SIGKILL")
    assert statuses == {before: "completed", during: "completed"}
    assert f"worker (pid {pid}) was killed by SIGKILL; restart 1" in up.log()
    assert " ERROR agentrun.up worker " in up.log()


def test_a_killed_beat_is_restarted(up: UpProcess) -> None:
    api = Api(up.url, up.client_key())
    pid, killed_at = _kill(up, "beat")
    wait_for(lambda: _not_ready_because(up, "beat"), STALE_S + MARGIN_S, "not ready")
    print(f"beat: not ready {time.monotonic() - killed_at:.1f} s after SIGKILL")
    wait_for(lambda: _restarted(up, "beat", pid), MARGIN_S, "beat's restart")
    wait_for(lambda: up.readiness()[0] == 200, 60, "ready again")
    print(f"beat: ready again {time.monotonic() - killed_at:.1f} s after SIGKILL")
    after = api.turn("sup-beat", "filed after beat's restart")
    assert api.wait_terminal([after], timeout=120) == {after: "completed"}
    assert f"beat (pid {pid}) was killed by SIGKILL; restart 1" in up.log()
    assert up.state()["worker"]["restarts"] == 0
