"""Processes for the outbox tests: the relay as a real Celery worker or `manage.py` command,
run against the test database, and the test process's Celery producer pointed at a real
broker (the machine's Redis)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import connection

from agentrun.celery import app as celery_app

REDIS_URL = "redis://127.0.0.1:6379/14"  # a database of its own: the dispatch tests use 13


def database_url_for_children() -> str:
    db = connection.settings_dict
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def outbox_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a child process: the test database and this test's outbox."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_children(),
        "AGENTRUN_DATA_DIR": str(data_dir),
        # Tests read Celery's own beat and task lines, which log only at DEBUG.
        "LOG_LEVEL": "DEBUG",
    }
    for name in (
        "AGENTRUN_KAFKA_BOOTSTRAP_SERVERS",
        "AGENTRUN_KAFKA_TOPIC",
        "AGENTRUN_KAFKA_OUTBOX_LEASE_MS",
        "AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS",
        "AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS",
    ):
        env[name] = str(getattr(settings, name))
    return {**env, **extra}


def wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return value


@contextmanager
def child(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run `argv` in its own process group; SIGTERM (then SIGKILL) it at the end."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextmanager
def outbox_celery_worker(data_dir: Path, *, listen: bool = False) -> Iterator[Path]:
    """`celery -A agentrun worker -B -Q outbox` on Redis; yields its log once it is ready.
    `listen`: the worker's LISTEN relay pickup on and no beat (`outbox.listener`)."""
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    log = data_dir / "worker.log"
    beat = [] if listen else ["-B"]
    argv = [sys.executable, "-m", "celery", "-A", "agentrun", "worker", *beat, "-Q", "outbox"]
    argv += ["--pool", "threads", "--concurrency", "2", "-s", str(data_dir / "beat-schedule")]
    argv += ["-n", f"outbox-test-{os.getpid()}@%h", "--without-gossip", "--without-mingle"]
    env = outbox_env(
        data_dir, CELERY_BROKER_URL=REDIS_URL, AGENTRUN_DISPATCH_LISTEN=str(listen).lower()
    )
    with child([*argv, "--loglevel", "INFO"], env, log):
        wait(lambda: b" ready." in log.read_bytes(), 60, "the Celery worker to start")
        yield log


@contextmanager
def celery_producer_on(url: str) -> Iterator[None]:
    """Point this process's Celery producer (on-commit wake-ups) at `url` for a while."""
    conf = celery_app.conf
    saved = conf.broker_url, conf.broker_transport_options

    def reset() -> None:  # Celery caches its producer pool on first use
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    conf.broker_url, conf.broker_transport_options = url, {}
    reset()
    try:
        yield
    finally:
        conf.broker_url, conf.broker_transport_options = saved
        reset()
