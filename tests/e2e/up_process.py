"""`manage.py up` as a real process for the end-to-end tests, and an HTTP client for it.

`UpProcess` starts `up` with the environment given (embedded defaults when it carries no
DATABASE_URL), waits on `/readyz`, reads the supervisor's state file (children's pids and
restart counts) and stops the whole tree with SIGTERM, as an operator would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ("completed", "failed", "cancelled")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)
    return value


class UpProcess:
    def __init__(
        self, data_dir: Path, env: Mapping[str, str | None], python: str = sys.executable
    ) -> None:
        self.data_dir = data_dir
        self.python = python  # another venv's interpreter: tests/e2e/test_runtime_install.py
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        unset = ("DATABASE_URL", "CELERY_BROKER_URL")  # embedded defaults unless `env` names them
        self.env = {k: v for k, v in os.environ.items() if k not in unset}
        self.env["AGENTRUN_DATA_DIR"] = str(data_dir)
        self.env["AGENTRUN_BIND"] = f"127.0.0.1:{self.port}"
        self.env.update({k: v for k, v in env.items() if v is not None})
        self.log_path = data_dir / "up.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout: float = 180) -> UpProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [self.python, str(ROOT / "manage.py"), "up"],
                env=self.env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wait_for(self.is_ready, ready_timeout, f"`up` to be ready (log: {self.log_path})", 0.2)
        return self

    def readiness(self) -> tuple[int, dict[str, Any]]:
        try:
            response = requests.get(f"{self.url}/readyz", timeout=5)
        except requests.RequestException:
            return 0, {}
        return response.status_code, response.json()

    def is_ready(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log()
        return self.readiness()[0] == 200

    def state(self) -> dict[str, dict[str, Any]]:
        return dict(json.loads((self.data_dir / "up-state.json").read_text()))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client_key(self) -> str:
        found = re.search(r"client key for tenant 'local' \(shown once\): (\S+)", self.log())
        assert found, "the banner printed no client key"
        return found.group(1)

    def stop(self) -> int:
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


BUSY_RETRIES = 10


def _is_busy(response: requests.Response) -> bool:
    if response.status_code != 503:
        return False
    try:
        return bool(response.json()["error"]["code"] == "database_busy")
    except (ValueError, KeyError, TypeError):
        return False


class Api:
    def __init__(self, url: str, key: str) -> None:
        self.url = f"{url}/api/v1"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"
        # One kept connection per concurrent caller (the bursts use 40 threads).
        self.session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=64))
        self.busy_retries = 0

    def turn(self, session: str, text: str) -> str:
        body = {
            "run": {
                "project_id": "e2e",
                "workspace_ref": {"path": "/tmp"},
                "provider_id": "local",
                "backend_profile": "scripted",
            },
            # A retried turn is the same turn (the key), never a second one.
            "command": {"payload": {"text": text}, "idempotency_key": f"turn-{uuid.uuid4().hex}"},
        }
        url = f"{self.url}/sessions/{session}/turns"
        response = self.session.post(url, json=body, timeout=60)
        # 503 `database_busy` (the server's connection pool stayed empty for its timeout, a
        # burst on a slow machine) asks the client to come back after Retry-After: a client
        # that does so is what the server promises to serve, so this one does.
        for _ in range(BUSY_RETRIES):
            if not _is_busy(response):
                break
            self.busy_retries += 1
            time.sleep(float(response.headers.get("Retry-After", "1")))
            response = self.session.post(url, json=body, timeout=60)
        assert response.status_code in (200, 201), response.text
        return str(response.json()["run"]["id"])

    def status(self, run_id: str) -> str:
        response = self.session.get(f"{self.url}/runs/{run_id}", timeout=60)
        assert response.status_code == 200, response.text
        return str(response.json()["status"])

    def wait_terminal(self, run_ids: list[str], timeout: float) -> dict[str, str]:
        """Wait until every run is terminal; return each one's status."""
        done: dict[str, str] = {}

        def all_done() -> bool:
            for run_id in run_ids:
                if run_id not in done and (status := self.status(run_id)) in TERMINAL:
                    done[run_id] = status
            return len(done) == len(run_ids)

        wait_for(all_done, timeout, f"{len(run_ids) - len(done)} of {len(run_ids)} runs", 0.5)
        return done
