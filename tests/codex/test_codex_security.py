"""Issue 16 with the real Codex binary: a client cannot configure Codex, and Codex starts
with none of the runner's (or the server's) variables.

The API tests send what a hostile tenant would (MCP servers, `notify`, a provider URL,
`danger-full-access`) on the real `codex` profile and are refused before anything is
stored. The backend test drives the real `codex app-server` (inside its loopback-only
namespace, with the mock model) from a runner environment full of secrets, and reads the
environment of every codex process from `/proc/<pid>/environ` while it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.backends.base import TurnInput
from runner.backends.codex import CodexBackend
from runs.models import Run
from tests.builders import key_client
from tests.codex.conftest import Harness, Recorder, mock_policy

API = "/api/v1"
SECRETS = {
    "DATABASE_URL": "postgres://agentrun:db-secret@127.0.0.1/agentrun",
    "SECRET_KEY": "django-secret",
    "CELERY_BROKER_URL": "redis://:broker-secret@127.0.0.1:6379/0",
    "PGPASSWORD": "pg-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AGENTRUN_RUNNER_KEY": "ar_runner_secret",
    "OPENAI_API_KEY": "sk-host",
}
ATTACKS = {
    "mcp_servers": {"mcp_servers": {"x": {"command": "/bin/sh", "args": ["-c", "id"]}}},
    "notify": {"notify": ["/bin/sh", "-c", "id > /tmp/pwned"]},
    "provider URL": {"codex_config": {"model_providers.p.base_url": "http://evil.example/v1"}},
    "danger-full-access": {"sandbox": "danger-full-access"},
}


@pytest.mark.django_db
@pytest.mark.parametrize("policy", ATTACKS.values(), ids=list(ATTACKS))
def test_a_turn_whose_policy_configures_codex_is_refused_at_the_api(
    policy: dict[str, Any],
) -> None:
    client = key_client(role="client", tenant_id="tenant-evil")
    run = {
        "project_id": "proj-1",
        "workspace_ref": {"path": "/work/repo"},
        "provider_id": "openai",
        "backend_profile": "codex",
        "execution_policy": mock_policy(**policy),
    }
    turn = {"run": run, "command": {"payload": {"text": "hello"}, "dispatch": {}}}
    answer = client.post(f"{API}/sessions/sess-evil/turns", turn, format="json")
    assert answer.status_code == 400, answer.json()
    assert "execution_policy" in answer.json()["error"]["details"]["field"]
    assert not Run.objects.filter(tenant_id="tenant-evil").exists()


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {name.decode(): value.decode() for name, value in pairs}


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[-1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def test_codex_starts_with_none_of_the_runners_variables(
    codex: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    backend = CodexBackend(codex.run())
    try:
        recorder = Recorder()
        outcome = backend.run_turn(
            TurnInput("cmd-1", "hello", {"text": "hello"}, None), recorder.control
        )
        assert outcome.terminal_status == "completed", recorder.events
        assert backend._process is not None
        pids = _descendants(backend._process.proc.pid)
        codex_pids = [p for p in pids if b"codex" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(codex_pids) >= 2  # the wrapper and the native app-server
        for pid in codex_pids:
            env = _environ(pid)
            leaked = {name for name, value in env.items() if value in SECRETS.values()}
            assert not leaked and not set(SECRETS) & set(env), (pid, sorted(env))
            assert not any(name.startswith(("AWS_", "AGENTRUN_", "DJANGO_")) for name in env)
            assert env["CODEX_HOME"].startswith(str(backend._workdir))  # this run's own
        cmdline = b" ".join(Path(f"/proc/{p}/cmdline").read_bytes() for p in codex_pids)
        assert b"mcp_servers" not in cmdline and b"notify" not in cmdline
    finally:
        backend.close()
