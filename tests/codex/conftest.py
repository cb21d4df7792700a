"""Fixtures for driving the real `codex app-server` against the mock Responses API.

Codex and the mock run together inside a loopback-only network namespace
(`unshare -n sh -c 'ip link set lo up && exec …'`): the JSON-RPC stdio pipes cross the
namespace, the test (and the runner) stay outside, and codex cannot reach any network.
The tests skip, with the reason printed, only when the codex binary is not installed or
`unshare -n` is not permitted here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from runner.backends.base import TurnControl

ROOT = Path(__file__).resolve().parents[2]
MOCK = Path(__file__).with_name("mock_responses.py")
MOCK_PORT = 18080  # every namespace has its own loopback: the port is always free
DAEMON_DIR = Path("/tmp/codex-daemon-0")  # codex creates it whenever a sandboxed command runs


def codex_binary() -> str | None:
    local = ROOT / ".codex-cli" / "node_modules" / ".bin" / "codex"
    return str(local) if local.exists() else shutil.which("codex")


def _skip_reason() -> str | None:
    if codex_binary() is None:
        return (
            "the codex binary is not installed "
            "(npm install --prefix .codex-cli @openai/codex@0.169.0, as .ci/run does)"
        )
    try:
        probe = subprocess.run(
            ["unshare", "-n", "sh", "-c", "ip link set lo up"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"`unshare -n` is not available: {error}"
    if probe.returncode != 0:
        return f"`unshare -n` is not permitted here: {probe.stderr.strip()}"
    return None


SKIP_REASON = _skip_reason()


@pytest.fixture(autouse=True)
def _needs_codex_and_netns() -> None:
    if SKIP_REASON is not None:
        print(f"\nSKIPPED codex test: {SKIP_REASON}")
        pytest.skip(SKIP_REASON)


# The operator's codex configuration (AGENTRUN_CODEX_CONFIG): the provider is theirs to
# choose, never a client's.
MOCK_PROVIDER_CONFIG: dict[str, Any] = {
    "model_provider": "mock",
    "model_providers": {
        "mock": {
            "name": "Loopback mock",
            "base_url": f"http://127.0.0.1:{MOCK_PORT}/v1",
            "wire_api": "responses",
            "request_max_retries": 0,
            "stream_max_retries": 0,
            "stream_idle_timeout_ms": 30000,
        }
    },
}


def mock_policy(**overrides: Any) -> dict[str, Any]:
    """An execution policy a client may send: per-turn choices only."""
    policy: dict[str, Any] = {"model": "mock-model", "sandbox": "read-only"}
    policy.update(overrides)
    return policy


@dataclass
class Harness:
    tmp: Path
    dump: Path
    workspace: Path

    def run(self, **policy: Any) -> dict[str, Any]:
        """The run dict the runner would hand to the backend."""
        return {
            "id": "run-codex-test",
            "backend_profile": "codex",
            "workspace_ref": {"path": str(self.workspace)},
            "execution_policy": mock_policy(**policy),
        }

    def requests(self) -> list[dict[str, Any]]:
        """The bodies the mock received, in order."""
        return [json.loads(p.read_text())["body"] for p in sorted(self.dump.iterdir())]


@pytest.fixture
def codex(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """AGENTRUN_CODEX_COMMAND = codex and the mock, inside a fresh loopback-only netns."""
    dump, workspace = tmp_path / "requests", tmp_path / "workspace"
    dump.mkdir()
    workspace.mkdir()
    command = [
        "unshare",
        "-n",
        "sh",
        "-c",
        'ip link set lo up && exec "$@"',
        "sh",
        sys.executable,
        str(MOCK),
        "--port",
        str(MOCK_PORT),
        "--dump",
        str(dump),
        "--exec",
        "--",
        str(codex_binary()),
        "app-server",
        "--listen",
        "stdio://",
    ]
    monkeypatch.setenv("AGENTRUN_CODEX_COMMAND", json.dumps(command))
    monkeypatch.setenv("AGENTRUN_CODEX_CONFIG", json.dumps(MOCK_PROVIDER_CONFIG))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("AGENTRUN_CODEX_HOME", raising=False)
    yield Harness(tmp_path, dump, workspace)
    _assert_nothing_left(str(tmp_path))


def _assert_nothing_left(marker: str) -> None:
    """No codex or mock process of this test outlives it; /tmp/codex-daemon-0 goes."""
    deadline = time.monotonic() + 5
    left = _processes_mentioning(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _processes_mentioning(marker)
    for pid in left:  # do not leak them into later tests, but fail this one
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)
    shutil.rmtree(DAEMON_DIR, ignore_errors=True)
    assert not left, f"processes left running: {left}"


def _processes_mentioning(marker: str) -> list[int]:
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (
                needle in (entry / "cmdline").read_bytes()
                or needle in (entry / "environ").read_bytes()
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@dataclass
class Recorder:
    """A TurnControl whose emit records the events, with a way to wait for one."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)
    control: TurnControl = field(init=False)

    def __post_init__(self) -> None:
        self.control = TurnControl(emit=self.emit)

    def emit(self, type: str, payload: dict[str, Any]) -> None:
        with self.changed:
            self.events.append((type, payload))
            self.changed.notify_all()

    def wait_for(self, condition: Callable[[str, dict[str, Any]], bool], timeout_s: float) -> None:
        with self.changed:
            if not self.changed.wait_for(
                lambda: any(condition(t, p) for t, p in self.events), timeout=timeout_s
            ):
                raise AssertionError(f"no matching event in {timeout_s}s: {self.types()}")

    def of(self, type: str) -> list[dict[str, Any]]:
        return [p for t, p in self.events if t == type]

    def types(self) -> list[str]:
        return [t for t, _ in self.events]

    def status(self, phase: str) -> list[dict[str, Any]]:
        return [p for p in self.of("backend_status") if p.get("phase") == phase]
