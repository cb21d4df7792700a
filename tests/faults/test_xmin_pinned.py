"""Fault: an idle transaction pins the xmin horizon (vacuum can remove no dead row).

A connection from outside the app (an operator's forgotten `psql`: the app role's own
idle-in-transaction timeout, 30 s by default, would end one of ours) holds a REPEATABLE
READ snapshot, idle, for `AGENTRUN_FAULT_XMIN_SECONDS` (20 s by default: the bounded
stand-in for "a minute"; set 60 to run the full minute). Meanwhile runners append, a
`relay_outbox --loop` process relays, and a dispatcher claims and launches intents (a
recording launcher). Every 5 s window must show claims and deliveries going on; after the
transaction ends, the backlog drains and VACUUM reclaims the dead rows.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection
from pytest_django.fixtures import Settings as SettingsWrapper

from dispatch.models import RunnerDispatchIntent
from dispatch.services.launch import dispatch_batch
from outbox.models import KafkaEventOutbox
from tests.dispatch.helpers import RecordingLauncher, make_dispatch_command, set_capacity
from tests.faults.harness import child_env, manage, process, raw_connection, wait_for
from tests.faults.invariants import assert_invariants
from tests.faults.outbox_load import outbox_runs, undelivered
from tests.outbox.builders import use_outbox, writer
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)
PIN_SECONDS = float(os.environ.get("AGENTRUN_FAULT_XMIN_SECONDS", "20"))
WINDOW = 5.0


def _load(runs: list[object], stop: threading.Event, launcher: RecordingLauncher) -> None:
    seed = 100
    try:
        while not stop.is_set():
            writer(runs, seed, 20)  # type: ignore[arg-type]
            make_dispatch_command(tenant_id="tenant-f10")
            dispatch_batch(launchers={"local": launcher}, limit=10)
            seed += 1
            time.sleep(0.05)
    finally:
        connection.close()


def _progress() -> tuple[int, int]:
    delivered = KafkaEventOutbox.objects.filter(delivered_at__isnull=False).count()
    return delivered, RunnerDispatchIntent.objects.filter(state="dispatched").count()


def _dead_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = %s",
            ["agentrun_kafka_event_outbox"],
        )
        return int(cursor.fetchone()[0])


def test_idle_transaction_pinning_xmin(
    settings: SettingsWrapper, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    use_outbox(settings, kafka_broker)
    set_capacity("scripted", 100_000)  # the recording launcher's runs never end
    runs = outbox_runs("f10")
    pin = raw_connection("fault-xmin-pin")
    pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    pin.execute("SELECT count(*) FROM agentrun_events")  # takes the snapshot
    stop, launcher = threading.Event(), RecordingLauncher()
    load = threading.Thread(target=_load, args=(runs, stop, launcher))
    windows: list[tuple[int, int]] = []
    relay = process(
        manage("relay_outbox", "--loop", "--idle-seconds", "0.05"),
        child_env(tmp_path, "fault-relay-loop"),
        tmp_path / "relay.log",
        "fault-relay-loop",
    )
    with relay:
        load.start()
        # The windows start once the relay process is up and delivering: on a loaded
        # machine its start alone can take a window, which is not what is measured here.
        wait_for(lambda: _progress()[0] > 0, 60, "the relay's first deliveries", 0.1)
        before = _progress()
        started = time.monotonic()
        while time.monotonic() - started < PIN_SECONDS:
            time.sleep(WINDOW)
            now = _progress()
            windows.append((now[0] - before[0], now[1] - before[1]))
            before = now
        pinned = _pinned_xmin()
        dead_pinned = _dead_rows()
        pin.rollback()  # the transaction ends
        pin.close()
        time.sleep(2)
        stop.set()
        load.join(timeout=30)
        wait_for(lambda: undelivered() == 0, 60, "the backlog to drain", 0.1)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM agentrun_kafka_event_outbox")
    time.sleep(0.5)  # the statistics collector
    counts = Counter(intent.state for intent in RunnerDispatchIntent.objects.all())
    print(
        f"\nxmin pinned {PIN_SECONDS:.0f}s (backend_xmin {pinned}): per {WINDOW:.0f}s window, "
        f"(delivered, dispatched) = {windows}; outbox dead rows {dead_pinned} while pinned, "
        f"{_dead_rows()} after it ended and VACUUM; intents {dict(counts)}; "
        f"launches {sum(launcher.launches.values())}"
    )
    assert pinned is not None
    assert all(delivered > 0 and dispatched > 0 for delivered, dispatched in windows)
    assert max(launcher.launches.values()) == 1  # no intent launched twice
    assert_invariants(outbox=True, reap=False)


def _pinned_xmin() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT backend_xmin::text FROM pg_stat_activity WHERE application_name = %s",
            ["fault-xmin-pin"],
        )
        row = cursor.fetchone()
    return None if row is None else row[0]
