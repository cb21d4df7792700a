"""Fault: a Celery relay worker SIGKILLed mid-batch.

The relay claims a batch (committed lease), produces it to Kafka with no transaction open,
then marks it delivered. The worker is killed while it holds a claim: records it had
produced but not marked are sent again by the next worker once the lease lapses
(at-least-once: a consumer sees them twice and dedupes by event id), nothing is lost, and
every key's events arrive in order.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from agentrun.task_queues import TaskName
from tests.faults.harness import (
    REDIS_OUTBOX,
    Proc,
    celery_worker,
    purge,
    running_a_statement,
    send_task,
    wait_for,
)
from tests.faults.invariants import assert_invariants
from tests.faults.outbox_load import (
    drain,
    fill_backlog,
    leased_by_pid,
    outbox_runs,
    read_back,
    undelivered,
)
from tests.outbox.builders import use_outbox
from tests.outbox.kafka_reader import KafkaReader
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)
EVENTS = 2_000


APP_NAME = "fault-relay-a"  # the first worker's application_name (tests/faults/harness.py)


def _kill_inside_a_batch(worker: Proc) -> None:
    """SIGKILL the worker while it holds a claim, after it delivered a few batches. It is
    stopped (SIGSTOP) first and its claim checked, so the kill cannot land just after the
    batch settled."""
    for _ in range(50):
        wait_for(
            lambda: undelivered() < EVENTS - 200 and leased_by_pid(worker.pid),
            60,
            "the worker to be inside a batch after delivering a few",
            0.002,
        )
        worker.signal(signal.SIGSTOP)
        # A statement the worker sent before it stopped (a settle's COMMIT) still runs on
        # the server: wait until none of its backends is active before reading its claim.
        wait_for(lambda: not running_a_statement(APP_NAME), 30, "the worker's statements")
        if leased_by_pid(worker.pid):
            worker.kill()
            return
        worker.signal(signal.SIGCONT)
    raise AssertionError("never caught the worker inside a batch")


def test_worker_killed_mid_relay_batch(
    settings: SettingsWrapper, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = use_outbox(settings, kafka_broker)
    settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS = 4_000
    fill_backlog(outbox_runs("f2"), EVENTS)
    purge(REDIS_OUTBOX)
    # The batches come through the broker (a kick chains the next), not the LISTEN pickup.
    env = {"AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE": "50", "AGENTRUN_DISPATCH_LISTEN": "false"}

    def kick() -> None:
        send_task(REDIS_OUTBOX, TaskName.RELAY_BATCH, "outbox")

    with KafkaReader(kafka_broker.bootstrap_servers, topic) as reader:
        with celery_worker(
            "relay-a", queues="outbox", broker=REDIS_OUTBOX, data_dir=tmp_path, **env
        ) as first:
            kick()  # a full batch chains the next one
            _kill_inside_a_batch(first)
        in_flight, left = leased_by_pid(first.pid), undelivered()
        print(f"\nrelay killed holding a claim of {in_flight} records; {left} undelivered")
        assert in_flight > 0, "the kill did not land inside a batch"

        with celery_worker(
            "relay-b", queues="outbox", broker=REDIS_OUTBOX, data_dir=tmp_path, **env
        ):
            took = drain(kick, timeout=90)
        events, duplicates = read_back(reader)
    print(f"drained {took:.1f}s; {events} events read in key order, {duplicates} duplicates")
    assert_invariants(outbox=True)
