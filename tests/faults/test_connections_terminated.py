"""Fault: PostgreSQL connections terminated under load (`pg_terminate_backend`).

Load: three runner threads append event batches to six runs, a `relay_outbox --loop` and a
`schedule_queue --loop` process work through the outbox and 80 queued tasks. For six
seconds every connection of theirs is terminated every 0.4 s. Services retry or fail
cleanly: each event batch is all there or not at all (a writer that saw its commit fail
may still find it committed: it looks before it retries), both worker processes survive
and finish their work, and the invariants hold.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import InterfaceError, OperationalError, connection
from pytest_django.fixtures import Settings as SettingsWrapper

from queues.models import QueueTask
from runs.models import Event, Run
from runs.services.event_log import NewEvent, append_runner_events
from tests.faults.harness import child_env, manage, process, terminate_connections, wait_for
from tests.faults.invariants import assert_invariants
from tests.faults.outbox_load import outbox_runs, undelivered
from tests.faults.test_queue_worker_killed import TASKS, _file_tasks
from tests.outbox.builders import RUNNER, use_outbox
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)
BATCH = 5


def _writer(runs: list[Run], name: str, stop: threading.Event, tally: Counter[str]) -> None:
    """Append batches until `stop`; a batch whose commit failed is looked up, then retried."""
    number = 0
    try:
        while not stop.is_set():
            run = runs[number % len(runs)]
            marker = f"{name}-{number}"
            events = [NewEvent("log", {"batch": marker, "n": n}) for n in range(BATCH)]
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SET application_name = 'fault-writer'")
                append_runner_events(
                    run_id=run.id, runner_id=RUNNER, lease_epoch=run.lease_epoch, events=events
                )
                tally["appended"] += 1
                number += 1
            except (OperationalError, InterfaceError):
                tally["failed"] += 1
                connection.close()
                if Event.objects.filter(run=run, payload__batch=marker).exists():
                    tally["committed though the client saw an error"] += 1
                    number += 1
    finally:
        connection.close()


def _batches_whole() -> Counter[int]:
    sizes: Counter[str] = Counter(
        Event.objects.filter(payload__has_key="batch").values_list("payload__batch", flat=True)
    )
    return Counter(sizes.values())


def test_connections_terminated_under_load(
    settings: SettingsWrapper, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    use_outbox(settings, kafka_broker)
    runs = outbox_runs("f6")
    _file_tasks()
    relay = process(
        manage("relay_outbox", "--loop", "--idle-seconds", "0.05"),
        child_env(tmp_path, "fault-relay-loop"),
        tmp_path / "relay.log",
        "fault-relay-loop",
    )
    scheduler = process(
        manage("schedule_queue", "--loop", "--interval", "0.1", "--limit", "5"),
        child_env(tmp_path, "fault-scheduler"),
        tmp_path / "scheduler.log",
        "fault-scheduler",
    )
    stop, tally = threading.Event(), Counter[str]()
    writers = [
        threading.Thread(target=_writer, args=(runs, f"w{n}", stop, tally)) for n in range(3)
    ]
    with relay as relay_proc, scheduler as scheduler_proc:
        for thread in writers:
            thread.start()
        terminated, ends = 0, time.monotonic() + 6
        while time.monotonic() < ends:
            time.sleep(0.4)
            terminated += terminate_connections("fault-")
        stop.set()
        for thread in writers:
            thread.join(timeout=30)
        alive = relay_proc.popen.poll() is None and scheduler_proc.popen.poll() is None
        wait_for(lambda: undelivered() == 0, 60, "the relay to drain the outbox", 0.1)
        running = QueueTask.objects.filter(state="running")
        wait_for(lambda: running.count() == TASKS, 60, "every task to start", 0.1)
    sizes = _batches_whole()
    print(
        f"\n{terminated} connections terminated in 6 s under load; writers: {dict(tally)}; "
        f"event batches by size: {dict(sizes)}; relay and scheduler survived: {alive}"
    )
    assert alive, "a worker process died of a terminated connection"
    assert set(sizes) == {BATCH}, "a batch was half-written"
    assert (
        sum(sizes.values()) == tally["appended"] + tally["committed though the client saw an error"]
    )
    assert terminated > 10 and tally["failed"] > 0
    assert_invariants(outbox=True, reap=False)
