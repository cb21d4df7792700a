"""The outbox relay workers of cell 7: agentrun's relay loop, the naive SKIP LOCKED relay
and the raw confluent-kafka producer (the limit). Each `*_worker(args)` runs inside a
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
            if watch.execute(RELAY_PENDING).fetchone()[0]:
                empty_since = None
            elif time.time() - (empty_since := empty_since or time.time()) > args.idle:
                break
        stop.set()
        loop.join()
        last = watch.execute(RELAY_LAST).fetchone()[0]
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


def producer_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The limit: raw confluent-kafka producing the same messages (read before `go`)."""
    import psycopg
    from confluent_kafka import Producer

    with psycopg.connect(env.database_url()) as conn:
        rows = conn.execute(
            "SELECT topic, partition_key, value::text, headers FROM agentrun_kafka_event_outbox"
            " ORDER BY outbox_seq"
        ).fetchall()
    messages = [
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
