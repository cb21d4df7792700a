"""The relay pickup on LISTEN (issue 18 item 2): a Celery worker of the outbox queue with
no beat, and no on-commit Celery wake-up sent, still relays a committed append's records:
its listener thread is woken by the append's `agentrun_outbox_committed` notification and relays
in-process, so no broker message is on the path."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from tests.outbox.builders import append_logs, claimed_run
from tests.outbox.kafka_reader import KafkaReader
from tests.outbox.processes import outbox_celery_worker, wait
from tests.outbox.relaying import backlog
from tests.support.kafka_broker import KafkaBroker


@pytest.mark.django_db(transaction=True)
def test_a_listening_worker_relays_a_committed_append_without_the_broker(
    outbox_topic: str, kafka_broker: KafkaBroker, settings: SettingsWrapper, tmp_path: Path
) -> None:
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    run = claimed_run()
    with (
        outbox_celery_worker(tmp_path, listen=True) as log,
        KafkaReader(kafka_broker.bootstrap_servers, outbox_topic) as reader,
    ):
        wait(lambda: b"outbox relay listener started" in log.read_bytes(), 30, "the listener")
        committed = time.monotonic()
        woken = {event.id for event in append_logs(run, 3)}
        assert reader.wait_for(woken, timeout=15) == set()
        pickup_ms = (time.monotonic() - committed) * 1000
        assert b"Task outbox.relay_batch[" not in log.read_bytes()  # the listener did it
    assert backlog() == 0
    print(f"\nLISTEN relay pickup, commit → read back from Kafka: {pickup_ms:.0f} ms")
