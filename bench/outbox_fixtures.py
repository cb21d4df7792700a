"""Cell 7's Kafka and outbox plumbing: the Tansu broker, the outbox records (one real
template record, then n SQL copies of it), a topic per sample, the relay workers'
environment, and `TopicReader`, the consumer whose read-back is the cell's ledger
(per-key `outbox_seq` order, lost records, `seq` gaps, duplicate event ids).

Apart from `bench.cells.outbox_relay` because both halves of that cell, the rate figures
and the fault run, set up and read back records the same way; the cell keeps only what
it runs and measures.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.test.utils import override_settings

from bench import env, fixtures
from bench.harness import Ledger
from runs.services.event_log import NewEvent, append_runner_events

KEYS = 500
_PAD = "x" * 600  # brings the CloudEvent to about 1 KB


def start_broker() -> Any:
    from tests.support.kafka_broker import KafkaBroker

    broker = KafkaBroker(log_dir=env.RESULTS)
    broker.start()
    return broker


def template_record(servers_: str) -> tuple[str, str, str]:
    """Write one real outbox record through the append service; return its run id, value
    and headers (JSON text), and delete it."""
    run = fixtures.claimed_runs(1)[0]
    with override_settings(AGENTRUN_KAFKA_BOOTSTRAP_SERVERS=servers_):
        append_runner_events(
            run_id=run.run_id,
            runner_id=run.runner_id,
            lease_epoch=run.lease_epoch,
            events=[NewEvent("log", {"stream": "stdout", "message": _PAD})],
        )
    with env.admin_connect() as conn:
        row = conn.execute(
            "SELECT run_id, value::text, headers::text FROM agentrun_kafka_event_outbox"
            " ORDER BY outbox_seq DESC LIMIT 1"
        ).fetchone()
        conn.execute("DELETE FROM agentrun_kafka_event_outbox")
    return row


def seed_records(template: tuple[str, str, str], n: int, topic: str) -> None:
    """n copies of the template record: key i % 500, outbox_seq i, per-key seq i / 500."""
    run_id, value, headers = template
    with env.admin_connect() as conn:
        conn.execute("DELETE FROM agentrun_kafka_event_outbox")
        conn.execute(
            """
            INSERT INTO agentrun_kafka_event_outbox (id, outbox_seq, event_id, run_id,
              source_seq, topic, partition_key, value, headers, attempt_count,
              next_attempt_at, created_at, updated_at)
            SELECT 'obx_b' || lpad(i::text, 9, '0'), 1000000 + i, 'evt_o' || i, %(run)s,
              1 + i / %(keys)s, %(topic)s, 'bench-key-' || (i %% %(keys)s),
              jsonb_set(jsonb_set(%(value)s::jsonb, '{id}', to_jsonb('evt_o' || i)),
                        '{partitionkey}', to_jsonb('bench-key-' || (i %% %(keys)s))),
              %(headers)s::jsonb || jsonb_build_object('event_id', 'evt_o' || i,
                'outbox_seq', (1000000 + i)::text, 'seq', (1 + i / %(keys)s)::text),
              0, now(), now(), now()
            FROM generate_series(0, %(n)s - 1) i
            """,
            {
                "keys": KEYS,
                "topic": topic,
                "n": n,
                "run": run_id,
                "value": value,
                "headers": headers,
            },
        )
        conn.execute("VACUUM ANALYZE agentrun_kafka_event_outbox")


def create_topic(servers: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers})
    futures = admin.create_topics([NewTopic(topic, num_partitions=12, replication_factor=1)])
    for future in futures.values():
        try:
            future.result(10)
        except Exception as error:  # an existing topic is fine
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise


def delete_topic(servers: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": servers})  # alive until its answer came
    for future in admin.delete_topics([topic]).values():
        future.result(10)


def undelivered() -> int:
    with env.admin_connect() as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM agentrun_kafka_event_outbox WHERE delivered_at IS NULL"
            ).fetchone()[0]
        )


class TopicReader:
    """Reads every partition of a topic from the beginning on its own thread, through
    broker restarts (librdkafka reconnects; no consumer group, so nothing to rejoin), and
    keeps (key, event id, outbox_seq, per-key seq) of every message in arrival order."""

    def __init__(self, servers: str, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": servers,
                "group.id": f"bench-{topic}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",  # never skip ahead: re-read (duplicates)
                "fetch.wait.max.ms": 50,
                "logger": _quiet_logger(),
            }
        )
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self.received: list[tuple[str, str, int, int]] = []
        self.event_ids: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TopicReader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.consumer.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            for message in self.consumer.consume(1000, timeout=0.2):
                if message.error():
                    continue
                headers = {k: v.decode() for k, v in (message.headers() or [])}
                event_id = headers["event_id"]
                key = message.key().decode()
                self.received.append(
                    (key, event_id, int(headers["outbox_seq"]), int(headers["seq"]))
                )
                self.event_ids.add(event_id)

    def wait_for(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.event_ids) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.event_ids) >= n

    def ledger(self, n: int) -> Ledger:
        """Per key, first copies must come in `outbox_seq` order; repeats are duplicates;
        `gaps` counts per-key `seq` values missing below the highest one read."""
        ledger = Ledger(expected=n)
        first_seen: set[str] = set()
        last_of_key: dict[str, int] = {}
        seqs: dict[str, set[int]] = {}
        for key, event_id, outbox_seq, seq in list(self.received):
            if event_id in first_seen:
                ledger.duplicates += 1
                continue
            first_seen.add(event_id)
            if last_of_key.get(key, -1) > outbox_seq:
                ledger.order_violations += 1
            last_of_key[key] = max(last_of_key.get(key, -1), outbox_seq)
            seqs.setdefault(key, set()).add(seq)
        ledger.seen = len(first_seen)
        ledger.lost = n - ledger.seen
        ledger.extra["gaps"] = sum(max(s) - len(s) for s in seqs.values())
        if ledger.extra["gaps"]:
            ledger.notes.append(f"{ledger.extra['gaps']} per-key seq gaps")
        return ledger


def _quiet_logger() -> Any:
    """librdkafka's connection-refused lines while the broker is down go to a logger, not
    the bench's stderr."""
    import logging

    logger = logging.getLogger("bench.kafka.client")
    logger.setLevel(logging.CRITICAL)
    return logger


@contextmanager
def outbox_env(servers_: str, topic: str, **extra: str) -> Iterator[None]:
    """The relay workers' environment: this sample's broker and topic."""
    names = {
        "AGENTRUN_KAFKA_BOOTSTRAP_SERVERS": servers_,
        "AGENTRUN_KAFKA_TOPIC": topic,
        **extra,
    }
    os.environ.update(names)
    try:
        yield
    finally:
        for name in names:
            os.environ.pop(name, None)
