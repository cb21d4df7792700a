"""Real Celery workers for the cells that measure the deployed dispatch path (cells 3, 4).

`celery_workers` starts `celery -A agentrun worker -Q dispatch --pool threads -c N`
processes on the machine's Redis (loopback), with the bench's no-op launcher plugged in
through `AGENTRUN_EXTRA_LAUNCHERS`, journaling every launch (`bench.launchers`), and kills
them on the way out. `producing_to_redis` points this process's Celery producer at the
same Redis, so the on-commit wake-ups a producer sends reach those workers.
`drain_through_celery` seeds a drain and sends the dispatch task to every worker thread;
`wait_dispatched` waits for it on the workers' journal, then on the database.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import env, queues

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


def drain_through_celery(
    n: int, threads: int, journal: Path, *, wait: bool = True
) -> tuple[list[str], float]:
    """Seed n intents and send the dispatch task once per worker thread (`threads` in
    all), and with `wait` wait for the drain. The seeded ids, and the epoch time the seed
    committed."""
    from agentrun.celery import app
    from agentrun.task_queues import TaskName

    ids = queues.seed("celery", n)
    seeded = time.time()
    for _ in range(threads):
        app.send_task(TaskName.DISPATCH_BATCH, kwargs={"trigger": "bench"}, queue="dispatch")
    if wait:
        wait_dispatched(journal, n, timeout=60)
    return ids, seeded


def wait_dispatched(journal: Path, n: int, *, timeout: float) -> float:
    """Wait until every intent is dispatched; the epoch time of the last dispatch. Until
    the workers' journal has n launches, this reads the journal's new lines, not the
    database: a count of the intents in the database, 20 times a second, read every row
    dispatched so far (12 ms a poll at 30,000, a tenth of a core taken from the side under
    test). Then the database, for the settles of the last launches."""
    deadline = time.monotonic() + timeout
    launched, offset = 0, 0
    while launched < n and time.monotonic() < deadline:
        time.sleep(0.05)
        if journal.exists():
            with journal.open("rb") as lines:
                lines.seek(offset)
                chunk = lines.read()
            chunk = chunk[: chunk.rfind(b"\n") + 1]  # whole lines only
            offset += len(chunk)
            launched += chunk.count(b"start ")
    with env.admin_connect() as conn:
        while True:
            done, last = conn.execute(
                "SELECT count(*), extract(epoch FROM max(dispatched_at))"
                " FROM agentrun_runner_dispatch_intents WHERE state = 'dispatched'"
            ).fetchone()
            if done >= n or time.monotonic() > deadline:
                return float(last or time.time())
            time.sleep(0.01)
