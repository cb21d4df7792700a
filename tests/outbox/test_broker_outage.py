"""A Kafka broker that goes away mid-relay, and comes back.

The broker here is the test's own Tansu process, so stopping it does not disturb the other
tests. Tansu keeps messages in memory: a restarted broker is empty, so what was delivered
before the outage is read before it, and the rest from the new log after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from outbox.kafka import deliver
from outbox.models import KafkaEventOutbox
from outbox.selectors import outbox_status
from outbox.services.relay import (
    Settled,
    claim_outbox_records,
    message_of,
    settle_outbox_records,
)
from runs.models import Event, Run
from tests.outbox.builders import claimed_run, use_outbox, writer
from tests.outbox.kafka_reader import KafkaReader, Received, order_report
from tests.outbox.relaying import relay_workers, wait_for_backlog
from tests.runs.threads import race
from tests.support.kafka_broker import KafkaBroker


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path)
    broker.start()
    yield broker
    broker.stop()


def delivered_ids() -> set[str]:
    return set(
        KafkaEventOutbox.objects.filter(delivered_at__isnull=False).values_list(
            "event_id", flat=True
        )
    )


def relay_until_delivered(broker: KafkaBroker, topic: str, runs: list[Run]) -> list[Received]:
    """Broker up: two writers, two relay workers. Every record marked delivered is then
    read back from Kafka (so nothing was marked delivered that the broker did not ack)."""
    with KafkaReader(broker.bootstrap_servers, topic) as reader:
        with relay_workers(2):
            race([lambda s=s: writer(runs, s, 150) for s in range(2)])
            assert wait_for_backlog(0, timeout=30) == 0
        assert reader.wait_for(delivered_ids()) == set()
        return reader.received


def fail_a_claimed_batch(broker: KafkaBroker) -> tuple[list[KafkaEventOutbox], str]:
    """Mid-relay: a worker has claimed a batch when the broker stops under it; every record
    goes back to retry with its error, none is marked delivered."""
    # The lease outlives the failed delivery even on a loaded machine (the producer reports
    # the stopped broker after its own timeout); the settle releases the records anyway.
    claims = claim_outbox_records(owner="relay-mid", limit=100, lease_ms=60_000)
    assert len(claims) == 100
    broker.stop()
    outcomes = deliver([message_of(claim) for claim in claims])
    assert all(outcome is not None for outcome in outcomes)
    settled = settle_outbox_records(claims=claims, outcomes=outcomes)
    assert settled == Settled(retried=len(claims))
    retried = KafkaEventOutbox.objects.filter(pk__in=[claim.id for claim in claims])
    assert all(r.last_error and r.attempt_count == 1 and not r.lease_owner for r in retried)
    return claims, outcomes[0].code  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
def test_broker_stopped_mid_relay_retries_then_everything_arrives_in_key_order(
    settings: SettingsWrapper, own_broker: KafkaBroker
) -> None:
    topic = use_outbox(settings, own_broker)
    settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS = 4_000  # failed reports come within 2 s
    runs = [claimed_run(session_id="sess-outage") for _ in range(2)]
    runs += [claimed_run() for _ in range(4)]
    read_before = relay_until_delivered(own_broker, topic, runs)
    delivered_before = delivered_ids()

    writer(runs, 10, 120)
    stopped_at = time.monotonic()
    claims, first_code = fail_a_claimed_batch(own_broker)
    with relay_workers(2) as failing:  # workers keep failing while writers go on
        writer(runs, 11, 80)
        time.sleep(5)
        status = outbox_status()
    assert delivered_ids() == delivered_before  # nothing was marked delivered meanwhile
    pending = KafkaEventOutbox.objects.filter(delivered_at__isnull=True)
    assert status["backlog"] == pending.count() > len(claims)
    assert status["retrying"] > len(claims) and status["first_error"]["code"] == first_code
    assert status["max_attempt_count"] >= 2 and sum(t.retried for t in failing) > 0

    own_broker.start()  # back, and empty (in-memory storage)
    outage, waiting = time.monotonic() - stopped_at, pending.count()
    with KafkaReader(own_broker.bootstrap_servers, topic) as after:
        restarted = time.monotonic()
        with relay_workers(2):
            assert wait_for_backlog(0, timeout=60) == 0
            drained = time.monotonic() - restarted
        expected = set(Event.objects.values_list("id", flat=True))
        assert after.wait_for(expected - delivered_before) == set()
        unique, duplicates = order_report(read_before + after.received)
    assert unique == len(expected)
    print(
        f"\nbroker outage {outage:.1f}s: {len(claims)} claimed records failed mid-relay "
        f"({first_code}); {waiting} records waiting at restart, max attempts "
        f"{status['max_attempt_count']}; drained {drained:.2f}s after restart; "
        f"{unique} events read, duplicates {duplicates}"
    )
