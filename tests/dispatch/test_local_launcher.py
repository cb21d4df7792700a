"""The `local` launcher really starts the reference runner (`python -m runner run`, on the
`scripted` backend), which claims its run over HTTP with the run-scoped key it was handed,
and which loads no Django: with `DATABASE_URL` unset it starts no PostgreSQL.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from dispatch.launchers.local import runner_command
from dispatch.services.launch import dispatch_batch
from dispatch.services.reconcile import reconcile_runner_jobs
from runs.models import Event, Run, RunnerJob
from tests.dispatch.helpers import intent_of, make_dispatch_command, phases


def wait_for(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_runner_command_defaults_to_python_m_runner_and_can_be_overridden() -> None:
    assert runner_command("run_1") == [sys.executable, "-m", "runner", "run", "--run", "run_1"]
    with override_settings(AGENTRUN_LOCAL_RUNNER_COMMAND="{python} x.py --id {run_id} -v"):
        assert runner_command("run_1") == [sys.executable, "x.py", "--id", "run_1", "-v"]
    with override_settings(AGENTRUN_LOCAL_RUNNER_COMMAND="my-runner --fast"):
        assert runner_command("run_1") == ["my-runner", "--fast", "--run", "run_1"]
    with override_settings(AGENTRUN_LOCAL_RUNNER_COMMAND="{python} {manage_py} runner"):
        manage_py = str(Path(__file__).resolve().parents[2] / "manage.py")
        assert runner_command("run_1") == [sys.executable, manage_py, "runner", "--run", "run_1"]


@pytest.mark.django_db(transaction=True)
def test_the_local_launcher_starts_a_runner_process_that_claims_and_finishes_its_run(
    live_server: Any, tmp_path: Path
) -> None:
    command = make_dispatch_command()
    with override_settings(
        AGENTRUN_API_URL=live_server.url,
        AGENTRUN_LOCAL_RUNNER_COMMAND="",
        AGENTRUN_DATA_DIR=tmp_path,
    ):
        counts = dispatch_batch(owner="w")
    assert (counts.claimed, counts.dispatched) == (1, 1)
    run = Run.objects.get(pk=command.run_id)
    wait_for(lambda: Run.objects.get(pk=run.id).status == "completed", timeout=60)
    intent = intent_of(command)
    job = RunnerJob.objects.get(run=run)
    assert job.idempotency_key == intent.runner_job_id and job.job_name.startswith("local-")
    assert job.result["argv"][1:] == ["-m", "runner", "run", "--run", run.id]
    log = Path(job.result["log_path"])
    assert log.parent == tmp_path / "runner-logs"
    wait_for(lambda: f"run {run.id} -> exit 0" in log.read_text())
    claimed = Event.objects.get(run=run, payload__phase="run-claimed")
    assert claimed.payload["runner_id"] == intent.active_runner_id
    echo = Event.objects.get(run=run, type="agent_message")
    assert echo.payload["text"] == "Echo: go"
    assert phases(run)[-1] == "terminal_status"


@pytest.mark.django_db(transaction=True)
def test_reconciliation_fails_a_run_whose_local_runner_exited_without_claiming_it(
    tmp_path: Path,
) -> None:
    command = make_dispatch_command()
    quits = f"{sys.executable} -c pass"
    with override_settings(AGENTRUN_LOCAL_RUNNER_COMMAND=quits, AGENTRUN_DATA_DIR=tmp_path):
        assert dispatch_batch(owner="w").dispatched == 1
    job = RunnerJob.objects.get(run=command.run_id)
    wait_for(lambda: not Path(f"/proc/{job.result['pid']}").exists())
    young = reconcile_runner_jobs(limit=10, grace_ms=60_000)
    assert (young.gone, young.terminalized) == (1, 0)  # just launched: only observed
    counts = reconcile_runner_jobs(limit=10, grace_ms=0)
    assert (counts.checked, counts.gone, counts.terminalized) == (1, 1, 1)
    run = Run.objects.get(pk=command.run_id)
    assert (run.status, run.failure_kind) == ("failed", "infra-failed")
    assert phases(run)[-3:] == ["runner-gone", "command-terminal", "terminal_status"]
    job.refresh_from_db()
    assert job.result["observed_state"] == "missing"
    assert reconcile_runner_jobs(limit=10, grace_ms=0).checked == 0  # nothing left open


@pytest.mark.django_db(transaction=True)
def test_dispatch_once_runs_one_batch_and_prints_its_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_dispatch_command()
    quits = f"{sys.executable} -c pass"
    with override_settings(AGENTRUN_LOCAL_RUNNER_COMMAND=quits, AGENTRUN_DATA_DIR=tmp_path):
        call_command("dispatch_once", "--json")
    counts = json.loads(capsys.readouterr().out)
    assert (counts["claimed"], counts["dispatched"], counts["failed"]) == (1, 1, 0)


def _postmasters() -> dict[int, str]:
    """PostgreSQL servers on this machine (a `postgres` whose parent is not one), each with
    its data directory (the server's working directory)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "comm").read_text().strip() != "postgres":
                continue
            parent = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[1]
            if Path(f"/proc/{parent}/comm").read_text().strip() != "postgres":
                found[int(entry.name)] = os.readlink(entry / "cwd")
        except OSError:  # it exited meanwhile, or is not ours to read
            continue
    return found


@pytest.mark.django_db(transaction=True)
def test_a_local_runner_with_database_url_unset_starts_no_postgresql(
    live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runner inherits the worker's environment: no DATABASE_URL, and a data directory
    # of its own, where an embedded server would put its `pgdata` (and be counted below).
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv("AGENTRUN_DATA_DIR", str(tmp_path))
    command = make_dispatch_command()
    before = _postmasters()
    with override_settings(
        AGENTRUN_API_URL=live_server.url,
        AGENTRUN_LOCAL_RUNNER_COMMAND="",
        AGENTRUN_DATA_DIR=tmp_path,
    ):
        assert dispatch_batch(owner="w").dispatched == 1
    pid = RunnerJob.objects.get(run=command.run_id).result["pid"]
    started: dict[int, str] = {}  # servers seen while the runner lived (one stops at exit)

    def runner_exited() -> bool:
        started.update({p: d for p, d in _postmasters().items() if p not in before})
        return not Path(f"/proc/{pid}").exists()  # the launcher reaps it when it exits

    wait_for(runner_exited, timeout=60)
    after = _postmasters()
    ours = {p: d for p, d in {**started, **after}.items() if d.startswith(str(tmp_path))}
    print(f"postmasters: {len(before)} before, {len(after)} after; this runner's: {ours}")
    assert ours == {} and not (tmp_path / "pgdata").exists()
    assert Run.objects.get(pk=command.run_id).status == "completed"  # it ran, without a DB
