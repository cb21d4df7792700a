"""The outbox relay workers of cell 7: agentrun's relay loop, the naive SKIP LOCKED relay,
the raw-minimal relay (a bound, not a correct relay) and the raw confluent-kafka producer
(the limit). Each `*_worker(args)` runs inside a
`python -m bench.workers` process and returns how many records it delivered and when it
last worked.

Apart from the queue workers (`bench.queue_workers`) because they read and settle the
Kafka outbox table and produce to a broker, not drain dispatch intents.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Any

from bench import env
from bench.worker_process import wait_for_go


def relay_worker(args: argparse.Namespace) -> dict[str, Any]:
    """agentrun's relay: `outbox.services.relay.run_relay_loop` (what `relay_outbox --loop`
    runs) on a thread, until no record has been undelivered for `--idle` seconds. Its last
    work is the newest `delivered_at` (the settle statement's time)."""
    import django
    import psycopg

    django.setup()
    from django.db import connection

    from outbox.kafka import ensure_topics, outbox_topic
    from outbox.services.relay import RelayResult, run_relay_loop

    connection.ensure_connection()
    ensure_topics({outbox_topic()})
    stop = threading.Event()
    totals: list[RelayResult] = []
    loop = threading.Thread(
        target=lambda: totals.append(run_relay_loop(stop=stop, idle_seconds=0.05))
    )
    with psycopg.connect(env.database_url(), autocommit=True) as watch:
        go = wait_for_go()
        loop.start()
        empty_since = None
        while time.time() < go + args.seconds:
            time.sleep(0.05)
            if _one(watch, RELAY_PENDING):
                empty_since = None
            elif time.time() - (empty_since := empty_since or time.time()) > args.idle:
                break
        stop.set()
        loop.join()
        last = _one(watch, RELAY_LAST)
    delivered = totals[0].delivered if totals else 0
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": float(last or 0),
        "delivered": delivered,
    }


RELAY_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM agentrun_kafka_event_outbox WHERE delivered_at IS NULL)"
)
RELAY_LAST = "SELECT extract(epoch FROM max(delivered_at)) FROM agentrun_kafka_event_outbox"


def _one(conn: Any, sql: str) -> Any:
    """The one value of a one-row query."""
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]


NAIVE_CLAIM = """
SELECT id, topic, partition_key, value::text, headers FROM agentrun_kafka_event_outbox
WHERE delivered_at IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
"""


def naive_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The naive relay: SKIP LOCKED a batch by id, produce all, flush, mark sent, commit."""
    import psycopg
    from confluent_kafka import Producer

    producer = Producer(_producer_config())
    with psycopg.connect(env.database_url()) as conn:
        go = wait_for_go()
        last, delivered, failed = 0.0, 0, []
        while time.time() < go + args.seconds:
            with conn.transaction():
                rows = conn.execute(NAIVE_CLAIM, [args.batch]).fetchall()
                if not rows:
                    break
                for _id, topic, key, value, headers in rows:
                    producer.produce(
                        topic,
                        value.encode(),
                        key.encode(),
                        headers=[(k, str(v).encode()) for k, v in headers.items()],
                        on_delivery=lambda err, _msg: failed.append(err) if err else None,
                    )
                producer.flush(30)
                conn.execute(
                    "UPDATE agentrun_kafka_event_outbox SET delivered_at = now()"
                    " WHERE id = ANY(%s)",
                    [[r[0] for r in rows]],
                )
            delivered += len(rows)
            last = time.time()
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": last,
        "delivered": delivered,
        "failed": len(failed),
    }


RAW_MINIMAL_READ = """
SELECT ctid::text, topic, partition_key, outbox_seq, value::text, headers
FROM agentrun_kafka_event_outbox
WHERE delivered_at IS NULL AND (topic, partition_key, outbox_seq) > (%s, %s, %s)
ORDER BY topic, partition_key, outbox_seq
LIMIT %s
"""
RAW_MINIMAL_MARK = (
    "UPDATE agentrun_kafka_event_outbox SET delivered_at = statement_timestamp()"
    " WHERE ctid = ANY(%s::tid[])"
)


def raw_minimal_worker(args: argparse.Namespace) -> dict[str, Any]:
    """NOT A CORRECT RELAY: the bound on any relay that records delivery in PostgreSQL.

    One process, one psycopg connection in autocommit, no lease, no lock, no fencing token
    and no retry: it is only valid as the outbox's single writer of `delivered_at` (a
    second one, or a writer appending behind its read position, would be missed or sent
    twice), and any delivery failure ends it. What it does, per batch of `--batch` rows:
    - reads the undelivered rows in (topic, partition key, outbox_seq) order with a keyset
      query over the pending key-order index (`(topic, partition_key, outbox_seq) WHERE
      delivered_at IS NULL`), continuing after the last row read, so no read re-walks
      rows settled earlier: the cheapest in-order read the schema allows;
    - produces them with the same producer settings as agentrun's relay;
    - once every delivery report of the previous batch is in (the batches are one deep,
      as agentrun's loop is: the next batch is read and produced before the previous one
      is settled), marks that batch delivered with one `UPDATE … SET delivered_at` found
      by the rows' ctids (no index lookup), its own autocommitted transaction.
    So per record PostgreSQL reads one index entry and one heap row and writes one row
    version (with the index entries a `delivered_at` change costs); agentrun also leases
    each record (a second row write), fences every row and locks each key's head.
    """
    import psycopg
    from confluent_kafka import Producer

    producer = Producer(_producer_config())
    with psycopg.connect(env.database_url(), autocommit=True) as conn:
        go = wait_for_go()
        after: tuple[str, str, int] = ("", "", -1)
        in_flight: tuple[list[str], list[Any]] | None = None
        delivered, last = 0, go
        while True:
            rows = conn.execute(RAW_MINIMAL_READ, [*after, args.batch]).fetchall()
            batch = _produce_rows(producer, rows) if rows else None
            if rows:
                after = rows[-1][1:4]
            if in_flight is not None:
                delivered += _mark_delivered(conn, producer, *in_flight)
                last = time.time()
            if batch is None:
                break
            in_flight = batch
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": last,
        "delivered": delivered,
    }


def _produce_rows(producer: Any, rows: list[tuple[Any, ...]]) -> tuple[list[str], list[Any]]:
    """Produce a batch; returns its ctids and the list its delivery reports go to."""
    reports: list[Any] = []
    for _ctid, topic, key, _seq, value, headers in rows:
        while True:
            try:
                producer.produce(
                    topic,
                    value.encode(),
                    key.encode(),
                    headers=headers,
                    on_delivery=lambda err, _m: reports.append(err),
                )
                break
            except BufferError:
                producer.poll(0.05)
    return [row[0] for row in rows], reports


def _mark_delivered(conn: Any, producer: Any, ctids: list[str], reports: list[Any]) -> int:
    """Wait for every report of a batch, then record its delivery in one UPDATE."""
    while len(reports) < len(ctids):
        producer.poll(0.05)
    if any(error is not None for error in reports):
        raise RuntimeError(f"raw-minimal: a delivery failed: {next(e for e in reports if e)}")
    return int(conn.execute(RAW_MINIMAL_MARK, [ctids]).rowcount)


def producer_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The limit: raw confluent-kafka producing the same messages (read before `go`)."""
    import psycopg
    from confluent_kafka import Producer

    with psycopg.connect(env.database_url()) as conn:
        rows = conn.execute(
            "SELECT topic, partition_key, value::text, headers FROM agentrun_kafka_event_outbox"
            " ORDER BY outbox_seq"
        ).fetchall()
    messages: list[tuple[str, bytes, bytes, list[tuple[str, str | bytes | None]]]] = [
        (t, v.encode(), k.encode(), [(a, str(b).encode()) for a, b in h.items()])
        for t, k, v, h in rows
    ]
    producer = Producer(_producer_config())
    go = wait_for_go()
    failed: list[Any] = []
    for topic, value, key, headers in messages:
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=lambda err, _msg: failed.append(err) if err else None,
                )
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": time.time(),
        "delivered": len(messages) - len(failed),
        "failed": len(failed),
    }


def _producer_config() -> dict[str, Any]:
    """The same producer settings as agentrun's relay (`outbox.kafka.producer_config`)."""
    return {
        "bootstrap.servers": os.environ["AGENTRUN_KAFKA_BOOTSTRAP_SERVERS"],
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
    }
