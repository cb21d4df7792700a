"""Fault: the Kafka broker stopped and restarted during relay.

A `relay_outbox --loop` process relays a backlog while writers append. The broker (this
test's own Tansu, in-memory: it comes back empty) is killed while it drains: batches fail,
records go back to retry with backoff, none is marked delivered that the broker did not
acknowledge. After the restart the backlog drains; every event is read from Kafka (before
the outage from the first log, after it from the new one), in order per key.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from outbox.models import KafkaEventOutbox
from tests.faults.harness import Proc, child_env, manage, process, wait_for
from tests.faults.invariants import assert_invariants
from tests.faults.outbox_load import fill_backlog, outbox_runs, read_back, undelivered
from tests.outbox.builders import use_outbox
from tests.outbox.kafka_reader import KafkaReader
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path / "kafka")
    (tmp_path / "kafka").mkdir()
    broker.start()
    yield broker
    broker.stop()


def _crash(broker: KafkaBroker) -> None:
    """SIGKILL the broker: no graceful shutdown that would finish the requests in flight."""
    proc, broker._proc = broker._proc, None
    assert proc is not None
    proc.kill()
    proc.wait()


def _freeze_between_batches(relay: Proc) -> None:
    for _ in range(500):
        relay.signal(signal.SIGSTOP)
        if not KafkaEventOutbox.objects.filter(lease_owner__isnull=False).exists():
            return
        relay.signal(signal.SIGCONT)
        time.sleep(0.003)
    raise AssertionError("the relay never paused between batches")


def _delivered_ids() -> set[str]:
    records = KafkaEventOutbox.objects.filter(delivered_at__isnull=False)
    return set(records.values_list("event_id", flat=True))


def test_kafka_broker_stopped_and_restarted_during_relay(
    settings: SettingsWrapper, own_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = use_outbox(settings, own_broker)
    settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS = 4_000  # delivery reports within 2 s
    runs = outbox_runs("f5")
    env = child_env(tmp_path, "fault-relay-loop", AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE="20")
    argv = manage("relay_outbox", "--loop", "--idle-seconds", "0.05")
    fill_backlog(runs, 3_000, seed=1)  # a backlog the relay is in the middle of
    with process(argv, env, tmp_path / "relay.log", "fault-relay-loop") as relay:
        with KafkaReader(own_broker.bootstrap_servers, topic) as before:
            wait_for(lambda: undelivered() < 2_700, 30, "relay to be under way", 0.01)
            # Freeze the relay between two batches while the reader catches up with what
            # was acknowledged: Tansu keeps it in memory only, and a crash would take with
            # it what nobody read yet (a real cluster keeps acknowledged writes).
            _freeze_between_batches(relay)
            delivered_before = _delivered_ids()
            assert before.wait_for(delivered_before) == set()
            earlier = list(before.received)
            _crash(own_broker)
            stopped = time.monotonic()
            relay.signal(signal.SIGCONT)  # its batch now meets a dead broker
        fill_backlog(runs, 400, seed=2)  # writers go on during the outage
        time.sleep(4)
        assert _delivered_ids() == delivered_before, "marked delivered without a broker"
        retrying = KafkaEventOutbox.objects.filter(last_error__isnull=False).count()
        waiting = undelivered()
        own_broker.start()  # back, empty
        with KafkaReader(own_broker.bootstrap_servers, topic) as after:
            wait_for(lambda: undelivered() == 0, 60, "the backlog to drain", 0.05)
            drained = time.monotonic() - stopped
            events, duplicates = read_back(after, earlier)
    print(
        f"\nbroker killed while the relay drained a backlog, down ~4 s: "
        f"{len(delivered_before)} delivered before, {waiting} "
        f"waiting ({retrying} with a recorded error) at restart; drained {drained:.1f}s after "
        f"the stop; {events} events read in key order, {duplicates} duplicates"
    )
    assert retrying > 0
    assert_invariants(outbox=True)
