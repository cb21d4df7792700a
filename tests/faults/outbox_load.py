"""Outbox helpers of the fault tests: a backlog of events over sessions and runs, who holds
which records, relaying until drained, and reading everything back from Kafka."""

from __future__ import annotations

import time
from collections.abc import Callable

from outbox.models import KafkaEventOutbox
from runs.models import Event, Run
from tests.outbox.builders import claimed_run, writer
from tests.outbox.kafka_reader import KafkaReader, Received, order_report


def outbox_runs(prefix: str) -> list[Run]:
    """Six claimed runs: two sessions of two runs each, and two runs of no session."""
    runs = [claimed_run(session_id=f"{prefix}-{n % 2}") for n in range(4)]
    return runs + [claimed_run() for _ in range(2)]


def fill_backlog(runs: list[Run], count: int, seed: int = 1) -> int:
    return writer(runs, seed, count)


def undelivered() -> int:
    return KafkaEventOutbox.objects.filter(delivered_at__isnull=True).count()


def leased_by_pid(pid: int) -> int:
    """Undelivered records a process holds a claim on (its owner is host:pid:relay_…)."""
    return KafkaEventOutbox.objects.filter(
        delivered_at__isnull=True, lease_owner__contains=f":{pid}:"
    ).count()


def drain(kick: Callable[[], None], timeout: float) -> float:
    """Call `kick` (enqueue a relay batch) every second until nothing is undelivered."""
    started = time.monotonic()
    deadline = started + timeout
    while undelivered():
        assert time.monotonic() < deadline, f"{undelivered()} records still undelivered"
        kick()
        time.sleep(1.0)
    return time.monotonic() - started


def read_back(reader: KafkaReader, earlier: list[Received] | None = None) -> tuple[int, int]:
    """Wait until Kafka has every event; check per-key order. Returns (events, duplicates).

    `earlier`: what was read from a broker that has since restarted empty (Tansu keeps no
    storage): its log and the new one are two clusters, each checked for order on its own.
    """
    expected = set(Event.objects.values_list("id", flat=True))
    seen_before = {message.event_id for message in earlier or []}
    assert reader.wait_for(expected - seen_before, timeout=60) == set()
    unique, duplicates = order_report(reader.received)
    if earlier:
        before, again = order_report(earlier)
        overlap = len(seen_before & {message.event_id for message in reader.received})
        unique, duplicates = unique + before - overlap, duplicates + again + overlap
    assert unique == len(expected)
    return unique, duplicates
