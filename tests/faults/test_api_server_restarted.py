"""Fault: the API server killed and restarted while clients long-poll events.

Three clients long-poll `GET /runs/{id}/events?after_seq=<cursor>&wait=5` against a
`manage.py runserver` process while a runner appends events. The server is SIGKILLed twice
mid-poll and started again on the same port; each client retries from its cursor (the
per-run seq) and ends with every event exactly once, in order: no gap, no duplicate.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from agentrun.auth import issue_api_key
from runs.models import Run
from runs.services.event_log import NewEvent, append_runner_events
from tests.faults.harness import child_env, free_port, manage, process, wait_for
from tests.faults.invariants import assert_invariants
from tests.outbox.builders import RUNNER, claimed_run

pytestmark = pytest.mark.django_db(transaction=True)
BURSTS, PER_BURST = 4, 15


class Poller(threading.Thread):
    def __init__(self, url: str, key: str, run_id: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.run_id, self.stop = url, run_id, stop
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"
        self.seqs: list[int] = []
        self.retries = 0

    def run(self) -> None:
        cursor = 0
        while not self.stop.is_set():
            try:
                response = self.session.get(
                    f"{self.url}/api/v1/runs/{self.run_id}/events",
                    params={"after_seq": cursor, "wait": 5, "limit": 500},
                    timeout=10,
                )
                response.raise_for_status()
                # A kill after the status line leaves a 200 whose body is cut short: to the
                # client that is a failed poll like any other (JSONDecodeError is a
                # RequestException), retried from the same cursor.
                page = response.json()
            except requests.RequestException:
                self.retries += 1  # the server is down: resume from the same cursor
                time.sleep(0.1)
                continue
            self.seqs += [item["seq"] for item in page["items"]]
            cursor = page["next_after_seq"]


def _server(tmp: Path, port: int, generation: int) -> Any:
    argv = manage("runserver", f"127.0.0.1:{port}", "--noreload", "--skip-checks")
    env = child_env(tmp, "fault-api")
    return process(argv, env, tmp / f"api-{generation}.log", "fault-api")


def _up(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def _burst(runs: list[Run], burst: int) -> None:
    for n in range(PER_BURST):
        for run in runs:
            event = NewEvent("agent_message_delta", {"delta": f"b{burst}-{n} "})
            append_runner_events(
                run_id=run.id, runner_id=RUNNER, lease_epoch=run.lease_epoch, events=[event]
            )
        time.sleep(0.02)


def test_api_server_restarted_while_long_polls_wait(tmp_path: Path) -> None:
    runs = [claimed_run(), claimed_run()]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    key = issue_api_key(tenant_id="tenant-a", role="client").secret
    stop = threading.Event()
    pollers = [Poller(url, key, run.id, stop) for run in (runs[0], runs[0], runs[1])]
    restarts = 0
    for poller in pollers:
        poller.start()
    for generation in range(3):
        with _server(tmp_path, port, generation) as server:
            wait_for(lambda: _up(url), 30, "the API server", 0.05)
            time.sleep(0.5)  # the pollers are parked in a long-poll now
            _burst(runs, generation)
            if generation < 2:
                server.signal(signal.SIGKILL)  # while every poller waits
                server.popen.wait()
                _burst(runs, 10 + generation)  # appended while the server is down
                restarts += 1
            else:
                last = {run.id: run.events.count() for run in runs}
                _wait_caught_up(pollers, last)
    stop.set()
    for poller in pollers:
        expected = list(range(1, last[poller.run_id] + 1))
        assert poller.seqs == expected, (poller.run_id, poller.seqs[:20])
    print(
        f"\nAPI server killed {restarts} times under {len(pollers)} long-polls: "
        f"{[len(p.seqs) for p in pollers]} events each, in order, none missed or repeated "
        f"({sum(p.retries for p in pollers)} retried polls)"
    )
    assert_invariants(reap=False)


def _wait_caught_up(pollers: list[Poller], last: dict[str, int]) -> None:
    def caught_up() -> bool:
        return all(len(poller.seqs) >= last[poller.run_id] for poller in pollers)

    wait_for(caught_up, 30, "every poller to catch up")
