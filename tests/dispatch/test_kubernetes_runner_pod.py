"""A runner the `kubernetes` launcher starts loads no Django: with `DATABASE_URL` unset it
starts no PostgreSQL (issue 14), as the local launcher's does (`test_local_launcher.py`).

There is no kubelet here, so the Job's one container is run on this machine the way a pod
would run it: the manifest's argv (the image's `python` is this interpreter) and nothing of
the environment but what the manifest sets, the runner key read from the Job's Secret.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from dispatch.launchers import Launched, LaunchRequest
from dispatch.launchers.kubernetes import job_manifest, job_name, secret_manifest
from dispatch.services.launch import dispatch_batch
from runs.models import Run, RunnerJob
from tests.dispatch.helpers import make_dispatch_command
from tests.dispatch.test_local_launcher import _postmasters, wait_for

ROOT = Path(__file__).resolve().parents[2]


class PodOnThisMachine:
    """The `kubernetes` launcher's manifests, run as a local process instead of a pod."""

    name = "kubernetes"

    def __init__(self, home: Path) -> None:
        self.home = home
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self, request: LaunchRequest) -> Launched:
        name = job_name(request.runner_job_id)
        job = job_manifest(request, name=name, namespace="agentrun")
        secret = secret_manifest(request, name=name, namespace="agentrun", job_uid="uid-1")
        container = job["spec"]["template"]["spec"]["containers"][0]
        env = {"PATH": os.environ["PATH"], "HOME": str(self.home)}  # what any image has
        for variable in container["env"]:
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            env[variable["name"]] = secret["stringData"][ref["key"]] if ref else variable["value"]
        assert container["args"][0] == "python" and "DATABASE_URL" not in env
        log = (self.home / "runner.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, *container["args"][1:]], env=env, cwd=ROOT, stdout=log, stderr=log
        )
        return Launched(
            launcher=self.name,
            job_name=name,
            namespace="agentrun",
            image=container["image"],
            manager_url=request.api_url,
            runner_id=request.runner_id,
            source_commit="test",
        )

    def abort(self, launched: Launched) -> None:
        if self.process is not None:
            self.process.terminate()

    def observe(self, job: RunnerJob) -> str:
        return "active"


@pytest.mark.django_db(transaction=True)
def test_a_kubernetes_runner_with_database_url_unset_starts_no_postgresql(
    live_server: Any, tmp_path: Path
) -> None:
    command = make_dispatch_command()
    pod = PodOnThisMachine(home=tmp_path)
    before = _postmasters()
    with override_settings(AGENTRUN_API_URL=live_server.url, AGENTRUN_LAUNCHER="kubernetes"):
        assert dispatch_batch(owner="w", launchers={"kubernetes": pod}).dispatched == 1
    assert pod.process is not None
    started: dict[int, str] = {}  # servers seen while the runner lived (one stops at exit)

    def runner_exited() -> bool:
        started.update({p: d for p, d in _postmasters().items() if p not in before})
        return pod.process is not None and pod.process.poll() is not None

    wait_for(runner_exited, timeout=60)
    # A server this runner started would keep its data under this checkout or its HOME;
    # other checkouts' test servers on the machine are not counted.
    ours = {p: d for p, d in started.items() if d.startswith((str(ROOT), str(tmp_path)))}
    assert ours == {}, (tmp_path / "runner.log").read_text()
    assert pod.process.returncode == 0, (tmp_path / "runner.log").read_text()
    assert Run.objects.get(pk=command.run_id).status == "completed"  # it ran, without a DB
