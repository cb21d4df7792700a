"""A real Celery worker with embedded beat, on a real broker (the machine's Redis, else
RabbitMQ), dispatches intents end to end: the on-commit wake-up claims a new intent well
within a second (the pickup latency is printed), and the beat claims one whose wake-up
was never sent. The runner is the test double (see test_local_launcher)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from dispatch.models import RunnerDispatchIntent
from dispatch.wakeup import wake_dispatcher
from runs.models import Backend, Command, Event, Run, RunnerJob
from tests.dispatch.helpers import celery_broker, make_dispatch_command

REDIS = ("127.0.0.1", 6379, "redis://127.0.0.1:6379/13")
RABBITMQ = ("127.0.0.1", 5672, "amqp://guest:guest@127.0.0.1:5672//")


def _broker_url() -> str:
    for host, port, url in (REDIS, RABBITMQ):
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex((host, port)) == 0:
                return url
    pytest.fail("neither Redis (6379) nor RabbitMQ (5672) is reachable on 127.0.0.1")


def _purge(url: str) -> None:
    """Drop messages an earlier run left in the test broker."""
    if url.startswith("redis://"):
        import redis

        redis.Redis.from_url(url).flushdb()


def _test_database_url() -> str:
    db = connection.settings_dict
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _wait(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)
    return value


@contextmanager
def celery_worker(
    broker: str,
    api_url: str,
    data_dir: Path,
    extra_env: dict[str, str] | None = None,
    *,
    beat: bool = True,
) -> Iterator[Path]:
    """`celery -A agentrun worker [-B]` against the test database; yields its log file."""
    log = data_dir / "worker.log"
    env = {
        **os.environ,
        # These tests pin the Celery paths (on-commit wake-up, beat, follow-ups); the
        # LISTEN pickup, which would race them, has its own (test_listen_pickup.py).
        "AGENTRUN_DISPATCH_LISTEN": "false",
        **(extra_env or {}),
        "DATABASE_URL": _test_database_url(),
        "CELERY_BROKER_URL": broker,
        "AGENTRUN_API_URL": api_url,
        "AGENTRUN_LOCAL_RUNNER_COMMAND": "",  # the reference runner, on `scripted`
        "AGENTRUN_DATA_DIR": str(data_dir),
        # The test reads Celery's own beat and task lines, which log only at DEBUG.
        "LOG_LEVEL": "DEBUG",
    }
    argv = [sys.executable, "-m", "celery", "-A", "agentrun", "worker", *(["-B"] if beat else [])]
    argv += ["-Q", "dispatch,maintenance", "--pool", "threads", "--concurrency", "2"]
    argv += ["-s", str(data_dir / "beat-schedule"), "-n", f"dispatch-test-{os.getpid()}@%h"]
    argv += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
    with log.open("wb") as out:
        worker = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=settings.BASE_DIR,
            start_new_session=True,
        )
    try:
        _wait(lambda: b" ready." in log.read_bytes(), 60, "the worker to start")
        yield log
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()


def _task_sessions(application_name: str) -> int:
    """The idle server sessions of a worker whose last statement was a dispatch batch's
    (its claim, as is or prepared, or the append's notification after its completion)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND state = 'idle' AND (query LIKE '%%pg_notify%%'"
            "   OR query LIKE '%%run_change_notify%%'"
            "   OR query LIKE '%%claim_with_keys%%'"
            "   OR query LIKE '%%agentrun_runner_dispatch_intents%%')",
            [application_name],
        )
        return int(cursor.fetchone()[0])


def _beat_ticks(log: Path) -> int:
    return log.read_bytes().count(b"Sending due task dispatch-batch")


def _beat_ticks_done(log: Path) -> bool:
    """Every dispatch task sent so far (only beat ticks, before any commit) has run."""
    done = re.findall(rb"dispatch\.dispatch_batch\[[^\]]+\] succeeded", log.read_bytes())
    return len(done) >= _beat_ticks(log)


def _dispatched(command: Command) -> RunnerDispatchIntent | None:
    return RunnerDispatchIntent.objects.filter(command=command, state="dispatched").first()


def _dispatcher(command: Command) -> str:
    event = Event.objects.get(run=command.run_id, payload__phase="runner-dispatched")
    return str(event.payload["dispatcher"])


def _completed(command: Command) -> bool:
    return Run.objects.get(pk=command.run_id).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_with_beat_dispatches_intents_end_to_end(
    live_server: Any, tmp_path: Path
) -> None:
    broker = _broker_url()
    _purge(broker)
    with celery_worker(broker, live_server.url, tmp_path) as log, celery_broker(broker):
        # Start right after a beat tick has been handled: the next one is ~5 s away, so
        # only the wake-up can pick the intent up within a second.
        ticks = _beat_ticks(log)
        _wait(lambda: _beat_ticks(log) > ticks and _beat_ticks_done(log), 15, "a beat tick")
        woken = make_dispatch_command()  # commits; on_commit sends the wake-up
        committed = time.monotonic()
        intent = _wait(lambda: _dispatched(woken), 5, "the woken intent to be dispatched")
        seen = time.monotonic() - committed
        latency = (intent.dispatched_at - intent.created_at).total_seconds()
        print(
            f"\npickup latency: intent created → dispatched {latency * 1000:.0f} ms "
            f"(commit → seen dispatched by the test {seen * 1000:.0f} ms; beat period 5 s)"
        )
        assert latency < 1.0
        assert _dispatcher(woken).endswith(":commit")
        _wait(lambda: _completed(woken), 20, "the runner to finish the woken run")

        with override_settings(AGENTRUN_DISPATCH_WAKE_ON_COMMIT=False):
            missed = make_dispatch_command()  # no wake-up: only the beat can find it
        _wait(lambda: _dispatched(missed), 15, "the beat to dispatch the missed intent")
        assert _dispatcher(missed).endswith(":beat")
        _wait(lambda: _completed(missed), 20, "the runner to finish the missed run")


@pytest.mark.django_db(transaction=True)
def test_one_wake_up_drains_a_burst_with_follow_up_batches(
    live_server: Any, tmp_path: Path
) -> None:
    """30 intents, batches of 5, one wake-up, no beat: each full batch queues its own
    follow-up (not coalesced), so the burst drains to the end. The launcher is plugged in
    through `AGENTRUN_EXTRA_LAUNCHERS`, as a deployment would add one."""
    broker = _broker_url()
    _purge(broker)
    Backend.objects.filter(profile="scripted").update(capacity={})  # no limit to wait on
    with override_settings(AGENTRUN_DISPATCH_WAKE_ON_COMMIT=False):
        burst = [make_dispatch_command(dispatch={"launch_profile": "recording"}) for _ in range(30)]
    extra = {
        "AGENTRUN_EXTRA_LAUNCHERS": "recording=tests.dispatch.helpers.RecordingLauncher",
        "AGENTRUN_LAUNCH_PROFILES": '{"recording": {"launcher": "recording"}}',
        "AGENTRUN_DISPATCH_BATCH_SIZE": "5",
        "AGENTRUN_DB_APPLICATION_NAME": f"burst-worker-{os.getpid()}",
    }
    with (
        celery_worker(broker, live_server.url, tmp_path, extra, beat=False),
        celery_broker(broker),
    ):
        wake_dispatcher()
        _wait(
            lambda: RunnerDispatchIntent.objects.filter(state="dispatched").count() == 30,
            30,
            "the burst to drain",
        )
        # Seven tasks (the last one claims nothing) ran on two threads, and the
        # connections they ran on outlive them (agentrun.worker_connections): the Django
        # fixup alone closes each one after its task (a session of the worker's own, not a
        # task's, may stay either way).
        name = extra["AGENTRUN_DB_APPLICATION_NAME"]
        kept = _wait(lambda: _task_sessions(name), 5, "a task's connection, idle")
        assert 1 <= kept <= 2, kept
    triggers = Counter(_dispatcher(command).rsplit(":", 1)[1] for command in burst)
    assert triggers == {"commit": 5, "continue": 25}, triggers
    assert RunnerJob.objects.count() == 30  # each launched once
