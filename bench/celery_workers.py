"""Real Celery workers for the cells that measure the deployed dispatch path (cells 3, 4).

`celery_workers` starts `celery -A agentrun worker -Q dispatch --pool threads -c N`
processes on the machine's Redis (loopback), with the bench's no-op launcher plugged in
through `AGENTRUN_EXTRA_LAUNCHERS`, journaling every launch (`bench.launchers`), and kills
them on the way out. `producing_to_redis` points this process's Celery producer at the
same Redis, so the on-commit wake-ups a producer sends reach those workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import env

REDIS_URL = "redis://127.0.0.1:6379/11"


@contextmanager
def celery_workers(*, processes: int, slots: int, batch: int, journal: Path) -> Iterator[None]:
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    workers: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(processes):
            workers.append(_start(index, slots=slots, batch=batch, journal=journal))
        yield
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()


@contextmanager
def producing_to_redis() -> Iterator[None]:
    from agentrun.celery import app

    saved = app.conf.broker_url, app.conf.broker_transport_options

    def reset() -> None:  # Celery caches its producer pool on first use
        app._pool = None
        app.amqp._producer_pool = None

    app.conf.broker_url, app.conf.broker_transport_options = REDIS_URL, {}
    reset()
    try:
        yield
    finally:
        app.conf.broker_url, app.conf.broker_transport_options = saved
        reset()


def journal_starts(journal: Path) -> list[tuple[str, float]]:
    """(intent id, epoch seconds) of every launch the workers journaled, in order."""
    if not journal.exists():
        return []
    starts = []
    for line in journal.read_text().splitlines():
        what, item, at = line.split(" ")
        if what == "start":
            starts.append((item, float(at)))
    return starts


def _start(index: int, *, slots: int, batch: int, journal: Path) -> subprocess.Popen[bytes]:
    """Start one worker and wait for its `ready.` line (its log is rewritten per sample)."""
    log_path = env.RESULTS / f"celery-worker-{index}.log"
    worker_env = {
        **os.environ,
        "CELERY_BROKER_URL": REDIS_URL,
        "AGENTRUN_EXTRA_LAUNCHERS": "noop=bench.launchers.JournalingNoopLauncher",
        "AGENTRUN_BENCH_JOURNAL": str(journal),
        "AGENTRUN_DISPATCH_BATCH_SIZE": str(batch),
        "LOG_LEVEL": "WARNING",
    }
    argv = [sys.executable, "-m", "celery", "-A", "agentrun", "worker", "-Q", "dispatch"]
    argv += ["--pool", "threads", "--concurrency", str(slots), "-n", f"bench-{index}@%h"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    argv += ["--loglevel", "INFO"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=env.ROOT, env=worker_env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while " ready." not in log_path.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"celery worker {index} did not start; see {log_path}")
        time.sleep(0.1)
    return proc
