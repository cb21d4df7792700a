"""The `local` launcher: the reference runner as a subprocess on this machine.

It starts `python -m runner run --run RUN_ID` (or `AGENTRUN_LOCAL_RUNNER_COMMAND`, a
command line in which `{run_id}`, `{python}` and, for older templates, `{manage_py}` are
replaced) in the project directory, so `runner` is importable whether or not it is
installed. The runner loads no Django: it needs neither the server's settings nor a
database (with `DATABASE_URL` unset, `manage.py runner` would start an embedded PostgreSQL
in every runner). It runs in its own session and process group, so a worker's exit or
Ctrl-C does not take the runner with it and `abort` can stop the whole group. The runner
gets `AGENTRUN_API_URL` and a run-scoped `AGENTRUN_RUNNER_KEY` in its environment (never on
its command line, which `ps` shows), and writes stdout and stderr to
`AGENTRUN_DATA_DIR/runner-logs/<runner job id>.log`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

from django.conf import settings

from agentrun import conf
from dispatch.launchers.base import JobState, Launched, LaunchError, LaunchRequest
from runs.models import RunnerJob


def runner_command(run_id: str) -> list[str]:
    """The runner's argv: the setting's template, or `python -m runner run --run RUN_ID`."""
    manage_py = str(Path(settings.BASE_DIR) / "manage.py")
    template = conf.local_runner_command()
    if not template:
        return [sys.executable, "-m", "runner", "run", "--run", run_id]
    words = shlex.split(template)
    values = {"run_id": run_id, "python": sys.executable, "manage_py": manage_py}
    argv = [word.format(**values) for word in words]
    return argv if any("{run_id}" in word for word in words) else [*argv, "--run", run_id]


def _process_start_ticks(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time): tells a live process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def _spawn(argv: list[str], *, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start argv in a new session (its own process group), output appended to the log."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )


class LocalLauncher:
    name = "local"

    def launch(self, request: LaunchRequest) -> Launched:
        """Start the runner process. Errors: `LaunchError` when it cannot be started."""
        log_dir = conf.data_dir() / "runner-logs"
        log_path = log_dir / f"{request.runner_job_id}.log"
        argv = runner_command(request.run_id)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            process = _spawn(argv, env=self._env(request), log_path=log_path)
        except OSError as error:
            raise LaunchError(f"could not start {argv[0]}: {error}", argv=argv) from error
        # Reap the child when it exits so it does not linger as a zombie of the worker.
        threading.Thread(target=process.wait, daemon=True).start()
        return Launched(
            launcher=self.name,
            job_name=f"local-{request.runner_job_id}",
            namespace="local",
            image="",
            manager_url=request.api_url,
            runner_id=request.runner_id,
            source_commit=conf.source_commit(),
            details={
                "pid": process.pid,
                "process_start": _process_start_ticks(process.pid),
                "log_path": str(log_path),
                "argv": argv,
            },
        )

    def _env(self, request: LaunchRequest) -> dict[str, str]:
        return {
            **os.environ,
            "AGENTRUN_API_URL": request.api_url,
            "AGENTRUN_RUNNER_KEY": request.runner_key,
            "AGENTRUN_RUN_ID": request.run_id,
            "AGENTRUN_COMMAND_ID": request.command_id,
            "AGENTRUN_RUNNER_ID": request.runner_id,
            "AGENTRUN_RUNNER_JOB_ID": request.runner_job_id,
            # One Codex home for every local run, so a session's next run resumes its thread.
            "AGENTRUN_CODEX_HOME": os.environ.get("AGENTRUN_CODEX_HOME")
            or str(conf.data_dir() / "codex-home"),
        }

    def abort(self, launched: Launched) -> None:
        """SIGTERM the runner's process group, if it is still the process we started."""
        pid = launched.details.get("pid")
        if isinstance(pid, int) and self._alive(pid, launched.details.get("process_start")):
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.killpg(pid, signal.SIGTERM)

    def observe(self, job: RunnerJob) -> str:
        """Active while the recorded pid runs with the recorded start time; else missing."""
        pid = job.result.get("pid")
        if not isinstance(pid, int):
            return JobState.UNKNOWN
        return (
            JobState.ACTIVE
            if self._alive(pid, job.result.get("process_start"))
            else (JobState.MISSING)
        )

    @staticmethod
    def _alive(pid: int, start: object) -> bool:
        ticks = _process_start_ticks(pid)
        if ticks is None:
            return False
        if not _is_running(pid):
            return False
        return start is None or ticks == start


def _is_running(pid: int) -> bool:
    """True unless the process is gone or a zombie (exited, not yet reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
