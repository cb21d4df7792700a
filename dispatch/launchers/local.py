"""The `local` launcher: the reference runner as a subprocess on this machine.

It starts `python -m runner run --run RUN_ID` (or `AGENTRUN_LOCAL_RUNNER_COMMAND`, a
command line in which `{run_id}`, `{python}` and, for older templates, `{manage_py}` are
replaced) in the project directory, so `runner` is importable whether or not it is
installed. The runner loads no Django: it needs neither the server's settings nor a
database (with `DATABASE_URL` unset, `manage.py runner` would start an embedded PostgreSQL
in every runner). It runs in its own session and process group, so a worker's exit or
Ctrl-C does not take the runner with it and `abort` can stop the whole group. The runner
writes stdout and stderr to `AGENTRUN_DATA_DIR/runner-logs/<runner job id>.log`.

The runner's environment is built from nothing (issue 16 finding 3), never copied from
the server's: any process of the agent can read its parent's environment, and the
server's holds `DATABASE_URL`, `SECRET_KEY` and the broker's credentials. It gets
`AGENTRUN_API_URL`, the run-scoped `AGENTRUN_RUNNER_KEY` (never on its command line,
which `ps` shows), the ids, `PATH`, `HOME`, the locale and `TZ`, the runner's own
`AGENTRUN_CODEX_*` settings, `CODEX_HOME` (one per session, see `codex_home`), and the
variables the operator names in `AGENTRUN_RUNNER_ENV_PASSTHROUGH`. The local launcher is
not an isolation boundary: the runner still runs as the server's user on its machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
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


# Copied from the server's environment when set: the basics every process expects, and the
# runner's own settings for its Codex backend (operator configuration, not secrets).
_BASE_NAMES = ("PATH", "HOME", "LANG", "TZ", "TMPDIR")
_RUNNER_SETTINGS = (
    "AGENTRUN_CODEX_COMMAND",
    "AGENTRUN_CODEX_CONFIG",
    "AGENTRUN_CODEX_ENV_PASSTHROUGH",
)
_SAFE_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def runner_env(request: LaunchRequest, *, codex_home: Path) -> dict[str, str]:
    """The runner's whole environment: an allow-list, never a copy of the server's."""
    names = {*_BASE_NAMES, *_RUNNER_SETTINGS, *conf.runner_env_passthrough()}
    env = {
        name: value for name, value in os.environ.items() if name in names or name.startswith("LC_")
    }
    env.update(
        AGENTRUN_API_URL=request.api_url,
        AGENTRUN_RUNNER_KEY=request.runner_key,
        AGENTRUN_RUN_ID=request.run_id,
        AGENTRUN_COMMAND_ID=request.command_id,
        AGENTRUN_RUNNER_ID=request.runner_id,
        AGENTRUN_RUNNER_JOB_ID=request.runner_job_id,
        CODEX_HOME=str(codex_home),
    )
    return env


def _segment(value: str) -> str:
    """An id as one directory name: itself when it is a safe word, else a digest of it."""
    if _SAFE_SEGMENT.fullmatch(value) and value not in (".", ".."):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def codex_home(request: LaunchRequest) -> Path:
    """`AGENTRUN_DATA_DIR/codex-homes/<tenant>/<session or run id>`, each level created
    0700: a session's runs share a home (the next run resumes the thread), tenants never."""
    path = conf.data_dir() / "codex-homes"
    for part in (request.tenant_id, request.session_id or request.run_id):
        path = path / _segment(part)
    for level in (path.parent.parent, path.parent, path):
        level.mkdir(mode=0o700, parents=True, exist_ok=True)
        level.chmod(0o700)  # mkdir's mode is masked by the umask
    return path


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
            env = runner_env(request, codex_home=codex_home(request))
            process = _spawn(argv, env=env, log_path=log_path)
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
