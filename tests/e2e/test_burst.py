"""Burst: `up` on embedded defaults (no DATABASE_URL, no CELERY_BROKER_URL: the embedded
PostgreSQL is both the database and the broker) takes 5 bursts of 40 concurrent session
turns; every turn completes and the worker is never restarted.

This is the load that killed the worker on kombu's filesystem broker within two or three
bursts of 8-15 turns (a message file read before its writer had filled it). Each turn
starts a real runner process on the `scripted` backend, so a burst is 40 processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.e2e.up_process import Api, UpProcess

BURSTS, TURNS = 5, 40


@pytest.fixture
def embedded_up(tmp_path: Path) -> Iterator[UpProcess]:
    up = UpProcess(tmp_path / "data", {"AGENTRUN_HEARTBEAT_INTERVAL_S": "2"})
    try:
        yield up.start()
    finally:
        assert up.stop() == 0, up.log()[-4000:]


def test_five_bursts_of_forty_turns_complete_without_a_worker_restart(
    embedded_up: UpProcess,
) -> None:
    api = Api(embedded_up.url, embedded_up.client_key())
    worker_pid = embedded_up.state()["worker"]["pid"]
    with ThreadPoolExecutor(TURNS) as pool:
        for burst in range(BURSTS):
            texts = [(f"burst-{i}", f"burst {burst} turn {i}") for i in range(TURNS)]
            run_ids = list(pool.map(lambda t: api.turn(*t), texts))
            statuses = api.wait_terminal(run_ids, timeout=300)
            assert set(statuses.values()) == {"completed"}, statuses
            print(f"burst {burst + 1}: {TURNS} turns completed ({api.busy_retries} busy retries)")
    state = embedded_up.state()
    assert state["worker"]["restarts"] == 0 and state["worker"]["pid"] == worker_pid
    assert all(child["restarts"] == 0 for child in state.values()), state
    assert "; restart " not in embedded_up.log()  # the supervisor logs every restart
    assert embedded_up.readiness()[0] == 200
