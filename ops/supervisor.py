"""The process supervisor of `manage.py up`: the API server, a Celery worker and beat as
child processes, each restarted when it dies.

Why separate children rather than `celery worker --beat` inside the server: a worker
that dies must be seen and replaced (the filesystem broker's crash left a zombie worker
behind a server that kept saying ready), and beat must not die with a worker.

- A child that exits is logged at ERROR (name, pid, exit code or signal) and started
  again after a backoff that doubles with each death inside the window (0.5 s, 1 s, 2 s…
  up to 10 s, jittered down to half: `agentrun.backoff`, the one formula); after
  `max_deaths` deaths of one child within `window_s`, `up` stops every child and exits
  non-zero, for the operator or the service manager to act.
- SIGTERM or Ctrl-C stops every child (SIGTERM, then SIGKILL after the grace period).
  Children run in process groups of their own, so Ctrl-C reaches them once, from here,
  and on Linux they get SIGTERM if `up` itself is killed (no orphaned worker).
- The state (pid, start time and restart count of each child) is written to a JSON file
  after every change, for operators and tests.
"""

from __future__ import annotations

import ctypes
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentrun.backoff import backoff_ms

log = logging.getLogger("agentrun.up")
PR_SET_PDEATHSIG = 1


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    started_at: float = 0.0
    next_start_at: float = 0.0
    deaths: deque[float] = field(default_factory=deque)


@dataclass
class Policy:
    """When the supervisor gives up (`max_deaths` within `window_s`), how long a restart
    waits (`agentrun.backoff`, doubling per recent death from the base up to the cap, with
    jitter), and how long children get to exit after SIGTERM."""

    max_deaths: int = 5
    window_s: float = 60.0
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 10.0
    grace_s: float = 20.0


class Supervisor:
    def __init__(
        self,
        children: Mapping[str, list[str]],
        *,
        env: Mapping[str, str],
        state_path: Path,
        policy: Policy | None = None,
    ) -> None:
        self.children = [Child(name, argv) for name, argv in children.items()]
        self.env = dict(env)
        self.state_path = state_path
        self.policy = policy or Policy()
        self._stopping = threading.Event()
        self.gave_up: str | None = None

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> int:
        """Start every child and keep them running until `stop()` or too many deaths.
        Returns the exit status for `up`: 0 after a stop, 1 after giving up."""
        try:
            while not self._stopping.is_set() and self.gave_up is None:
                for child in self.children:
                    self._tend(child)
                self._stopping.wait(0.2)
        finally:
            self._stop_all()
        return 1 if self.gave_up else 0

    def _tend(self, child: Child) -> None:
        now = time.monotonic()
        if child.process is None:
            if now >= child.next_start_at:
                self._start(child)
            return
        code = child.process.poll()
        if code is not None:
            self._died(child, code, now)

    def _start(self, child: Child) -> None:
        # libpq's PGAPPNAME: pg_stat_activity then says which child holds each connection.
        env = {"PGAPPNAME": f"agentrun-{child.name}", **self.env}
        child.process = subprocess.Popen(
            child.argv, env=env, process_group=0, preexec_fn=_die_with_parent
        )
        child.started_at = time.time()
        log.info("started %s (pid %d)", child.name, child.process.pid)
        self._write_state()

    def _died(self, child: Child, code: int, now: float) -> None:
        assert child.process is not None
        pid, child.process = child.process.pid, None
        child.deaths.append(now)
        while child.deaths and child.deaths[0] < now - self.policy.window_s:
            child.deaths.popleft()
        recent = len(child.deaths)
        if recent >= self.policy.max_deaths:
            self.gave_up = child.name
            log.critical(
                "%s (pid %d) %s: %d deaths within %.0f s, stopping agentrun",
                child.name,
                pid,
                describe_exit(code),
                recent,
                self.policy.window_s,
            )
            return
        delay = self._restart_delay_s(recent)
        child.restarts += 1
        child.next_start_at = now + delay
        log.error(
            "%s (pid %d) %s; restart %d in %.1f s",
            child.name,
            pid,
            describe_exit(code),
            child.restarts,
            delay,
        )
        self._write_state()

    def _restart_delay_s(self, recent_deaths: int) -> float:
        """The wait before restarting a child that died `recent_deaths` times lately."""
        policy = self.policy
        base_ms, cap_ms = round(policy.backoff_base_s * 1000), round(policy.backoff_cap_s * 1000)
        return backoff_ms(recent_deaths, base_ms=base_ms, cap_ms=cap_ms) / 1000

    def _stop_all(self) -> None:
        running = [c for c in self.children if c.process is not None]
        for child in running:
            assert child.process is not None
            log.info("stopping %s (pid %d)", child.name, child.process.pid)
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.policy.grace_s
        for child in running:
            assert child.process is not None
            try:
                child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s (pid %d) ignored SIGTERM: killed", child.name, child.process.pid)
                child.process.kill()
                child.process.wait()
            child.process = None
        self._write_state()

    def _write_state(self) -> None:
        state = {
            child.name: {
                "pid": child.process.pid if child.process else None,
                "started_at": child.started_at,
                "restarts": child.restarts,
            }
            for child in self.children
        }
        temporary = self.state_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(state, indent=2))
        temporary.replace(self.state_path)  # readers never see half a file


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
