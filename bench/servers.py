"""Servers the cells start on loopback: gunicorn serving the API (cell 2).

Each is a context manager that starts the process on a free 127.0.0.1 port, waits until it
answers, and stops it (SIGTERM, then SIGKILL) on the way out, so a failed cell leaves
nothing running.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench import env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Gunicorn:
    port: int
    workers: int
    threads: int
    master_pid: int

    def worker_pids(self) -> list[int]:
        import psutil

        return [child.pid for child in psutil.Process(self.master_pid).children()]


@contextmanager
def gunicorn(
    *, workers: int, threads: int, app: str = "agentrun.wsgi:application"
) -> Iterator[Gunicorn]:
    """`gunicorn agentrun.wsgi -k gthread -w W --threads T` on loopback, bench database.
    `app`: another WSGI application (cell 2 serves `bench.http_wsgi`, agentrun's with its
    reference routes beside it)."""
    port = free_port()
    binary = Path(sys.executable).with_name("gunicorn")
    log = (env.RESULTS / "gunicorn.log").open("w")
    command = [
        str(binary),
        app,
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        "--log-level",
        "warning",
        "--keep-alive",
        "30",
        "--backlog",
        "256",
    ]
    process = subprocess.Popen(
        command, cwd=env.ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT
    )
    try:
        _wait_ready(port, process)
        yield Gunicorn(port, workers, threads, process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}; see gunicorn.log")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status < 500:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not answer /healthz in time")
