"""Processes the fault tests start, stop, kill, freeze and skew, against the test database.

- Celery workers on the machine's Redis (databases 10, 11, 12: the dispatch and outbox
  tests use 13 and 14), each in its own process group, so SIGKILL, SIGSTOP and SIGCONT
  reach the worker and its pool at once.
- `manage.py` loops (`relay_outbox --loop`, `schedule_queue --loop`) and the small loops of
  `tests/faults/loops.py`.
- Every child's database connections carry `application_name` (libpq's `PGAPPNAME`), so a
  test can find them in `pg_stat_activity` and terminate exactly those.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from agentrun.celery import app as celery_app
from tests.outbox.processes import child, database_url_for_children

REDIS_DISPATCH = "redis://127.0.0.1:6379/10"
REDIS_OUTBOX = "redis://127.0.0.1:6379/11"
REDIS_QUEUE = "redis://127.0.0.1:6379/12"


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(every)
    return value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(data_dir: Path, app_name: str, **extra: str) -> dict[str, str]:
    """A child's environment: the test database, its own data dir and application name,
    and this test's outbox settings (off unless the test turned it on)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url_for_children(),
        "AGENTRUN_DATA_DIR": str(data_dir),
        "PGAPPNAME": app_name,
        "DJANGO_SETTINGS_MODULE": "agentrun.settings",
    }
    for name in (
        "AGENTRUN_KAFKA_BOOTSTRAP_SERVERS",
        "AGENTRUN_KAFKA_TOPIC",
        "AGENTRUN_KAFKA_TOPIC_PARTITIONS",
        "AGENTRUN_KAFKA_OUTBOX_LEASE_MS",
        "AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS",
        "AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS",
    ):
        env[name] = str(getattr(settings, name))
    env.pop("CELERY_BROKER_URL", None)
    for name in ("DISPATCH", "QUEUE", "KAFKA_OUTBOX"):  # each test enqueues what it means
        env[f"AGENTRUN_{name}_WAKE_ON_COMMIT"] = "false"
    return {**env, **extra}


@dataclass
class Proc:
    """A started child process (the leader of its own process group)."""

    popen: subprocess.Popen[bytes]
    log: Path
    app_name: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def signal(self, sig: int) -> None:
        os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the leader."""
        self.signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def process(argv: list[str], env: dict[str, str], log: Path, app_name: str) -> Iterator[Proc]:
    with child(argv, env, log) as popen:
        yield Proc(popen, log, app_name)


def manage(*args: str) -> list[str]:
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), *args]


@contextmanager
def celery_worker(
    name: str, *, queues: str, broker: str, data_dir: Path, **env: str
) -> Iterator[Proc]:
    """`celery -A agentrun worker -Q <queues>` (threads pool, no beat): ready when yielded."""
    log = data_dir / f"{name}.log"
    argv = [sys.executable, "-m", "celery", "-A", "agentrun", "worker", "-Q", queues]
    argv += ["--pool", "threads", "--concurrency", "1", "-n", f"{name}-{os.getpid()}@%h"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    environment = child_env(data_dir, f"fault-{name}", CELERY_BROKER_URL=broker, **env)
    with process(argv, environment, log, f"fault-{name}") as proc:
        wait_for(lambda: b" ready." in log.read_bytes(), 60, f"worker {name} to start", 0.05)
        yield proc


def purge(broker: str) -> None:
    import redis

    redis.Redis.from_url(broker).flushdb()


def send_task(broker: str, name: str, queue: str, **kwargs: Any) -> None:
    """Enqueue a task on `broker` (the test process's producer is pointed there briefly)."""
    with celery_app.connection_for_write(broker) as conn:
        celery_app.send_task(name, kwargs=kwargs, queue=queue, connection=conn)


def connections_of(app_name: str) -> list[int]:
    """Backend pids of the connections a child opened (by `application_name`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [app_name],
        )
        return [int(row[0]) for row in cursor.fetchall()]


def terminate_connections(app_prefix: str) -> int:
    """`pg_terminate_backend` every connection whose application name starts with the
    prefix; returns how many were terminated."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE %s "
            "AND pid <> pg_backend_pid()",
            [app_prefix.replace("%", "") + "%"],
        )
        return int(cursor.fetchone()[0])


def waiting_on_lock(app_name: str) -> bool:
    return _backends_of(app_name, "Lock", None) > 0


def running_a_statement(app_name: str) -> bool:
    """A child's backend is still running a statement (a COMMIT sent before it stopped)."""
    return _backends_of(app_name, None, "active") > 0


def _backends_of(app_name: str, wait_event_type: str | None, state: str | None) -> int:
    """A child's backends, of that wait event type and state where given."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %(app)s "
            "AND (%(wait)s::text IS NULL OR wait_event_type = %(wait)s) "
            "AND (%(state)s::text IS NULL OR state = %(state)s)",
            {"app": app_name, "wait": wait_event_type, "state": state},
        )
        return int(cursor.fetchone()[0])


def raw_connection(app_name: str) -> psycopg.Connection[Any]:
    """A connection from outside the app (no app-role timeouts), like an operator's psql."""
    return psycopg.connect(database_url_for_children(), application_name=app_name)
