"""Prompt pickup by a real Celery worker (Redis broker, embedded beat) and the relay
commands: a commit wakes the relay; beat relays what no wake-up announced; `relay_outbox`
runs the same service once or in a loop that SIGTERM ends after its batch."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings as SettingsWrapper

from outbox.models import KafkaEventOutbox
from outbox.record import _relay_waker as relay_waker
from tests.outbox.builders import append_logs, claimed_run
from tests.outbox.kafka_reader import KafkaReader, order_report
from tests.outbox.processes import (
    REDIS_URL,
    celery_producer_on,
    child,
    outbox_celery_worker,
    outbox_env,
    wait,
)
from tests.outbox.relaying import backlog
from tests.support.kafka_broker import KafkaBroker

BEAT_TICK = b"Sending due task outbox-relay"


def delivered(event_ids: set[str]) -> bool:
    records = KafkaEventOutbox.objects.filter(event_id__in=event_ids, delivered_at__isnull=False)
    return records.count() == len(event_ids)


def quiesce(log: Path) -> None:
    """Every wake-up this process queued is sent (its sender thread is one, in order), and
    the worker has finished every task it received: a wake-up of an announced append still
    queued or in flight would otherwise relay the unannounced records before beat does."""
    if relay_waker._sender is not None:
        relay_waker._sender[1].submit(lambda: None).result(timeout=10)

    def idle() -> bool:
        text = log.read_bytes()
        return text.count(b"] received") == text.count(b"] succeeded")

    wait(idle, 15, "the worker to finish the tasks it received")


@pytest.mark.django_db(transaction=True)
def test_a_commit_wakes_a_celery_worker_and_beat_relays_what_no_wake_up_announced(
    outbox_topic: str, kafka_broker: KafkaBroker, settings: SettingsWrapper, tmp_path: Path
) -> None:
    run = claimed_run()
    with (
        outbox_celery_worker(tmp_path) as log,
        celery_producer_on(REDIS_URL),
        KafkaReader(kafka_broker.bootstrap_servers, outbox_topic) as reader,
    ):
        settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = True
        pickups = []
        for start in (0, 3):  # a cold worker (first producer, topic check), then a warm one
            committed = time.monotonic()
            woken = {event.id for event in append_logs(run, 3, start=start)}  # on_commit wakes
            assert reader.wait_for(woken, timeout=10) == set()
            pickups.append((time.monotonic() - committed) * 1000)
        assert log.read_bytes().count(BEAT_TICK) == 0  # no beat tick yet: wake-ups did it

        settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
        quiesce(log)  # no wake-up of the announced appends still on its way
        unannounced = {event.id for event in append_logs(run, 2, start=6)}
        wait(lambda: delivered(unannounced), 15, "beat to relay the unannounced records")
        assert log.read_bytes().count(BEAT_TICK) >= 1
        assert reader.wait_for(unannounced) == set()
        order_report(reader.received)
    assert backlog() == 0
    print(
        f"\npickup, commit → read back from Kafka: cold worker {pickups[0]:.0f} ms, "
        f"warm {pickups[1]:.0f} ms (beat period 5 s)"
    )


@pytest.mark.django_db(transaction=True)
def test_relay_outbox_runs_one_batch_and_its_loop_ends_after_sigterm(
    outbox_topic: str, kafka_broker: KafkaBroker, settings: SettingsWrapper, tmp_path: Path
) -> None:
    settings.AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE = 10
    run = claimed_run()
    append_logs(run, 14)
    total = KafkaEventOutbox.objects.count()
    call_command("relay_outbox", "--json", stdout=(out := _Capture()))
    assert json.loads(out.text) == {"claimed": 10, "delivered": 10, "retried": 0, "refused": 0}

    argv = [sys.executable, "manage.py", "relay_outbox", "--loop", "--idle-seconds", "0.2"]
    env = outbox_env(tmp_path, AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE="10")
    log = tmp_path / "relay.log"
    with child([*argv, "--json"], env, log) as proc:
        wait(lambda: backlog() == 0, 30, "the loop to relay the rest")
        append_logs(run, 25, start=14)  # picked up by the loop's next batches
        wait(lambda: backlog() == 0, 30, "the loop to relay new records")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    totals = json.loads(log.read_text().strip().splitlines()[-1])
    assert totals["delivered"] == total - 10 + 25 and totals["retried"] == 0


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass
