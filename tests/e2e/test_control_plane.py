"""End to end: the whole control plane as `make run` starts it, driven over HTTP.

`manage.py up` runs as a real process (API server, Celery worker and beat on the
database broker, local launcher) against the test database; turns filed over HTTP are
dispatched to real runner subprocesses on the `scripted` backend.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from django.db import connection

from agentrun.auth import issue_api_key
from runs.models import RunnerJob

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def control_plane(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "AGENTRUN_DATA_DIR": str(tmp_path),
        "AGENTRUN_BIND": f"127.0.0.1:{port}",
    }
    env.pop("CELERY_BROKER_URL", None)
    log = (tmp_path / "up.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "up"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(lambda: _ready(url), 60, "the API")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/readyz", timeout=2).status_code == 200
    except requests.RequestException:  # refused, or too slow to answer while it starts
        return False


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


class Client:
    def __init__(self, url: str) -> None:
        self.url = f"{url}/api/v1"
        key = issue_api_key(tenant_id="e2e", role="client").secret
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def get(self, path: str, **params: Any) -> Any:
        response = self.session.get(f"{self.url}{path}", params=params, timeout=40)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any], expect: int = 200) -> Any:
        response = self.session.post(f"{self.url}{path}", json=body, timeout=40)
        assert response.status_code in (expect, 201 if expect == 200 else expect), response.text
        return response.json()

    def turn(self, session: str, text: str, **command: Any) -> Any:
        body = {
            "run": {
                "project_id": "e2e",
                "workspace_ref": {"path": "/tmp"},
                "provider_id": "local",
                "backend_profile": "scripted",
            },
            "command": {"payload": {"text": text, **command}},
        }
        return self.post(f"/sessions/{session}/turns", body, expect=201)

    def output(self, session: str, run_id: str) -> str:
        page = self.get(f"/sessions/{session}/output", run_id=run_id, limit=500)
        return " ".join(
            e["payload"].get("text") or "" for e in page["items"] if e["type"] == "agent_message"
        )

    def wait_run(self, run_id: str, timeout: float = 60) -> str:
        def terminal() -> str | None:
            status = self.get(f"/runs/{run_id}")["status"]
            return status if status in ("completed", "failed", "cancelled") else None

        return str(_wait(terminal, timeout, f"run {run_id}"))


def test_turns_steers_and_cancels_run_end_to_end(control_plane: str) -> None:
    api = Client(control_plane)
    first = api.turn("e2e-1", "hello end to end")
    assert first["disposition"] == "created"
    states = [api.get("/sessions/e2e-1")["execution_state"]]
    assert api.wait_run(first["run"]["id"]) == "completed"
    session = api.get("/sessions/e2e-1")
    states.append(session["execution_state"])
    assert "Echo: hello end to end" in api.output("e2e-1", first["run"]["id"])
    assert states == ["running", "terminal"]
    thread_id = session["thread_id"]
    assert thread_id

    second = api.turn("e2e-1", "again")
    assert api.wait_run(second["run"]["id"]) == "completed"
    assert api.get("/sessions/e2e-1")["thread_id"] == thread_id  # the thread is resumed

    long = api.turn("e2e-1", "count", scripted={"mode": "long", "ticks": 30, "tick_ms": 100})
    run_id = long["run"]["id"]
    _wait(lambda: api.get(f"/runs/{run_id}")["status"] == "running", 30, "the long turn")
    api.post("/sessions/e2e-1/steer", {"payload": {"text": "say blue"}}, expect=201)
    assert api.wait_run(run_id) == "completed"
    assert "[steer] say blue" in api.output("e2e-1", run_id)

    hang = api.turn("e2e-1", "wait", scripted={"mode": "hang"})
    run_id = hang["run"]["id"]
    _wait(lambda: api.get(f"/runs/{run_id}")["status"] == "running", 30, "the hanging turn")
    runner_pid = RunnerJob.objects.get(run_id=run_id).result["pid"]
    assert _alive(runner_pid)
    receipt = api.post("/sessions/e2e-1/cancel", {"reason": "stop"})
    assert receipt["cancel_request"]["stage"] == "terminalized"
    assert api.wait_run(run_id, timeout=5) == "cancelled"
    # The runner sees the cancel at its next heartbeat (lease 30 s: every 10 s) or sooner
    # through its event stream, and exits.
    cancelled_at = time.monotonic()
    _wait(lambda: not _alive(runner_pid), 2 * 10 + 2, "the runner to exit")
    print(f"runner exited {time.monotonic() - cancelled_at:.1f}s after the cancel")


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for its parent has exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
