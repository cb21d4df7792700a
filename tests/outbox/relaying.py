"""Relay helpers of the outbox tests: relay workers on their own threads, and a drain."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

from outbox.models import KafkaEventOutbox
from outbox.services.relay import RelayResult, relay_outbox_batch, run_relay_loop


@contextmanager
def relay_workers(count: int, *, idle_seconds: float = 0.02) -> Iterator[list[RelayResult]]:
    """Run `count` relay loops (the `relay_outbox --loop` function), each on its own thread
    and database connection, until the block ends; yields their totals, filled at the end."""
    stop = threading.Event()
    totals: list[RelayResult] = []

    def work() -> None:
        try:
            totals.append(run_relay_loop(stop=stop, idle_seconds=idle_seconds))
        finally:
            connection.close()

    threads = [threading.Thread(target=work, name=f"relay-{n}") for n in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield totals
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)


def backlog() -> int:
    return KafkaEventOutbox.objects.filter(delivered_at__isnull=True).count()


def wait_for_backlog(expected: int, timeout: float) -> int:
    """Wait until the undelivered count is `expected`; returns the last count seen."""
    deadline = time.monotonic() + timeout
    left = backlog()
    while left != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        left = backlog()
    return left


def outbox_drained(max_batches: int = 1_000) -> RelayResult:
    """Relay synchronously on this thread until a batch finds nothing due."""
    totals = RelayResult()
    for _ in range(max_batches):
        result = relay_outbox_batch()
        totals += result
        if result.claimed == 0:
            break
    return totals
