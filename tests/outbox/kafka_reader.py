"""A test consumer: reads every partition of a topic from the beginning, in a thread.

No consumer group (Tansu's group rebalance takes many seconds): partitions are assigned
directly at the beginning offset, which is also what a replaying consumer does. Each
message is decoded into what the order checks need.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition


@dataclass(frozen=True)
class Received:
    event_id: str
    key: str
    run_id: str
    seq: int
    outbox_seq: int
    partition: int
    value: dict[str, Any]
    headers: dict[str, str]


class KafkaReader:
    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": f"reader-{topic}-{time.monotonic_ns()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
            }
        )
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KafkaReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._consumer.close()

    @property
    def received(self) -> list[Received]:
        with self._lock:
            return list(self._received)

    def event_ids(self) -> set[str]:
        return {message.event_id for message in self.received}

    def wait_for(self, event_ids: set[str], timeout: float = 30.0) -> set[str]:
        """Wait until every id was read; returns the ids still missing at the deadline."""
        deadline = time.monotonic() + timeout
        missing = event_ids - self.event_ids()
        while missing and time.monotonic() < deadline:
            time.sleep(0.05)
            missing = event_ids - self.event_ids()
        return missing

    def _run(self) -> None:
        self._assign()
        while not self._stop.is_set():
            for message in self._consumer.consume(500, 0.1):
                if message.error() is None:
                    self._keep(message)

    def _assign(self) -> None:
        while not self._stop.is_set():
            topics = self._consumer.list_topics(self.topic, timeout=5).topics
            partitions = topics[self.topic].partitions if self.topic in topics else {}
            if partitions and topics[self.topic].error is None:
                self._consumer.assign(
                    [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions]
                )
                return
            time.sleep(0.1)

    def _keep(self, message: Any) -> None:
        headers = {name: value.decode() for name, value in message.headers() or []}
        value = json.loads(message.value())
        received = Received(
            event_id=value["id"],
            key=message.key().decode(),
            run_id=value["data"]["run_id"],
            seq=value["data"]["seq"],
            outbox_seq=int(headers["outbox_seq"]),
            partition=message.partition(),
            value=value,
            headers=headers,
        )
        with self._lock:
            self._received.append(received)


def order_report(received: list[Received]) -> tuple[int, int]:
    """Check per-key order and return (unique events, duplicates).

    Per partition key, in the order read, the first copy of each event must come in
    ascending `outbox_seq` (so also in ascending per-run `seq`), and every message of the key
    must be in one partition. Later copies of an event (at-least-once) are duplicates.
    """
    seen: set[str] = set()
    last_outbox_seq: dict[str, int] = defaultdict(lambda: -1)
    last_run_seq: dict[str, int] = defaultdict(lambda: 0)
    partitions: dict[str, set[int]] = defaultdict(set)
    duplicates = 0
    for message in received:
        partitions[message.key].add(message.partition)
        if message.event_id in seen:
            duplicates += 1
            continue
        seen.add(message.event_id)
        assert message.outbox_seq > last_outbox_seq[message.key], (message, "out of key order")
        assert message.seq > last_run_seq[message.run_id], (message, "out of run order")
        last_outbox_seq[message.key] = message.outbox_seq
        last_run_seq[message.run_id] = message.seq
    assert all(len(parts) == 1 for parts in partitions.values()), "a key spans partitions"
    return len(seen), duplicates
