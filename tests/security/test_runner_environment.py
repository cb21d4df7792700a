"""Issue 16 finding 3, as the attack: the agent reads its runner's environment (any process
of the agent can read `/proc/<parent>/environ`) and found the control plane's secrets —
`DATABASE_URL` with every tenant's data, `SECRET_KEY`, the broker and cloud credentials;
`runner-jobs[].result` showed the client the runner's pid, host paths and argv; and the
run-scoped key the agent saw went on working after its run ended.

The runner here is the real one, started by the real local launcher: its environment is
read from `/proc/<pid>/environ` while its turn runs; then the run is cancelled and the key
read from that environment is refused.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from agentrun.models import ApiKey
from dispatch.services.launch import dispatch_batch
from runner.backends.codex.config import codex_env
from runs.models import Run, RunnerJob
from runs.services.cancellation import cancel_run
from runs.services.command_lifecycle import create_command
from tests.builders import api_client, key_client, make_run

API = "/api/v1"
SERVER_SECRETS = {
    "SECRET_KEY": "django-secret-of-the-server",
    "CELERY_BROKER_URL": "redis://:broker-password@127.0.0.1:6379/0",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "PGPASSWORD": "pg-secret",
}
HOST_KEYS = ("pid", "process_start", "log_path", "argv")


def _wait_for(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {name.decode(): value.decode() for name, value in pairs}


def _hanging_dispatched_run(live_server: Any, tmp_path: Path) -> tuple[Run, RunnerJob]:
    run = make_run(tenant_id="tenant-a", session_ref={"session_id": "sess-env", "metadata": {}})
    payload = {"text": "x", "scripted": {"mode": "hang"}}
    create_command(run_id=run.id, type="turn", payload=payload, dispatch={})
    with override_settings(
        AGENTRUN_API_URL=live_server.url,
        AGENTRUN_LOCAL_RUNNER_COMMAND="",
        AGENTRUN_DATA_DIR=tmp_path,
    ):
        assert dispatch_batch(owner="w").dispatched == 1
    _wait_for(lambda: Run.objects.get(pk=run.pk).status == "running")
    return run, RunnerJob.objects.get(run=run)


@pytest.mark.django_db(transaction=True)
def test_a_local_runner_holds_none_of_the_servers_secrets_and_its_key_ends_with_the_run(
    live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SERVER_SECRETS.items():
        monkeypatch.setenv(name, value)
    assert "DATABASE_URL" in os.environ  # the server has one; the runner must not
    run, job = _hanging_dispatched_run(live_server, tmp_path)
    pid = job.result["pid"]
    env = _environ(pid)
    leaked = {name for name in env if name in {*SERVER_SECRETS, "DATABASE_URL"}}
    assert leaked == set(), leaked
    assert not any(name.startswith(("AWS_", "CELERY_", "DJANGO_")) for name in env)
    assert {"AGENTRUN_API_URL", "AGENTRUN_RUNNER_KEY", "AGENTRUN_RUN_ID", "PATH"} <= set(env)
    home = Path(env["CODEX_HOME"])  # finding 4: one home per session, under the data dir
    assert home == tmp_path / "codex-homes" / "tenant-a" / "sess-env"
    assert home.stat().st_mode & 0o777 == 0o700

    key = api_client(env["AGENTRUN_RUNNER_KEY"])
    assert key.get(f"{API}/runs/{run.id}").status_code == 200  # while its run lives
    cancel_run(run_id=run.id, reason="user stop")
    refused = key.get(f"{API}/runs/{run.id}")
    assert refused.status_code == 401, refused.json()
    _wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.django_db(transaction=True)
def test_runner_job_results_show_a_client_nothing_about_the_host(
    live_server: Any, tmp_path: Path
) -> None:
    run, job = _hanging_dispatched_run(live_server, tmp_path)
    try:
        client = key_client(role="client", tenant_id="tenant-a")
        (seen,) = client.get(f"{API}/runs/{run.id}/runner-jobs").json()["items"]
        assert not set(HOST_KEYS) & set(seen["result"]), seen["result"]
        assert seen["result"]["launcher"] == "local"
        (listed,) = client.get(f"{API}/runs").json()["items"]
        assert not set(HOST_KEYS) & set(listed["latest_runner_job"]["result"])
        operator = key_client(role="operator", tenant_id="ops")
        (full,) = operator.get(f"{API}/runs/{run.id}/runner-jobs").json()["items"]
        assert full["result"]["pid"] == job.result["pid"]  # operators still see the host
    finally:
        cancel_run(run_id=run.id, reason="done")


@pytest.mark.django_db
def test_a_runner_key_stops_working_when_it_expires() -> None:
    run = make_run()
    runner = key_client(role="runner", tenant_id=run.tenant_id, run_id=run.id)
    issued = ApiKey.objects.get(pk=runner.api_key.pk)  # type: ignore[attr-defined]
    assert issued.expires_at is not None and issued.expires_at > timezone.now()
    assert runner.get(f"{API}/runs/{run.id}").status_code == 200
    ApiKey.objects.filter(pk=issued.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert runner.get(f"{API}/runs/{run.id}").status_code == 401


def test_codex_starts_with_an_allow_listed_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What a runner on a badly set-up host might carry: none of it may reach codex.
    for name, value in {**SERVER_SECRETS, "DATABASE_URL": "postgres://u:p@db/x"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGENTRUN_RUNNER_KEY", "ar_runner_secret")
    env = codex_env(str(tmp_path / "home"), str(tmp_path))
    assert not {*SERVER_SECRETS, "DATABASE_URL", "AGENTRUN_RUNNER_KEY"} & set(env)
    assert set(env) <= {
        *("PATH", "HOME", "LANG", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "SHLVL"),
        *(name for name in env if name.startswith("LC_")),
        *("CODEX_HOME", "TMPDIR", "NO_PROXY", "RUST_LOG"),
    }
