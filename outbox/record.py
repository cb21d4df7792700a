"""Recording outbox records in the event's own transaction (seed `appendEventWithLockedRun`).

This is the outbox module of the projection tier (SPEC §9.1): functions the `runs`
services call inside the run's transaction, in lock order (run → commands → session →
queue → key lock; the outbox key lock comes last), each named `*_locked`. A projection
module imports only the models, locks and versions of `runs` and of its own app, plus
`agentrun` (`tests/test_projection_layers.py`).

`record_outbox_locked` is not a service of its own: the runs event append calls it right
after it inserts a batch of events, inside the caller's transaction and under the run's
row lock, so the records commit or roll back with their events. Per call it takes one
advisory lock, draws one batch of sequence values and makes one bulk insert, whatever the
number of events. With the outbox disabled it returns at once and writes nothing.

After commit, one Celery task per transaction wakes the relay (`outbox.relay_batch`), so a
record is picked up at once rather than at the next beat tick.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from agentrun import conf
from agentrun.ids import new_id
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker
from outbox.cloudevents import cloud_event, message_headers, partition_key_for
from outbox.kafka import outbox_enabled, outbox_topic
from outbox.locks import lock_outbox_key
from outbox.models import KafkaEventOutbox
from outbox.sql import reserve_outbox_seqs
from runs.models import Event, Run


def record_outbox_locked(*, run: Run, events: list[Event]) -> list[KafkaEventOutbox]:
    """Write one outbox record per event. Needs the caller's transaction and run lock.

    Locks: the (topic, partition key) advisory lock, held to commit, taken before the
    sequence values are drawn. Side effect after commit: the relay is woken.
    """
    if not events or not outbox_enabled():
        return []
    topic, key = outbox_topic(), partition_key_for(run)
    lock_outbox_key(topic=topic, partition_key=key)
    seqs = reserve_outbox_seqs(len(events))
    now = timezone.now()
    records = [
        _record(run=run, event=event, topic=topic, key=key, outbox_seq=seq, now=now)
        for event, seq in zip(events, seqs, strict=True)
    ]
    KafkaEventOutbox.objects.bulk_create(records)
    _wake_relay_on_commit()
    return records


def _record(
    *, run: Run, event: Event, topic: str, key: str, outbox_seq: int, now: datetime
) -> KafkaEventOutbox:
    source = conf.kafka_source()
    value = cloud_event(run=run, event=event, partition_key=key, source=source)
    return KafkaEventOutbox(
        id=new_id("obx"),
        outbox_seq=outbox_seq,
        event_id=event.id,
        run=run,
        source_seq=event.seq,
        topic=topic,
        partition_key=key,
        value=value,
        headers=message_headers(run=run, event=event, outbox_seq=outbox_seq),
        created_at=now,
        updated_at=now,
    )


def _wake_relay_on_commit() -> None:
    """Register one relay wake-up for this transaction, however many appends it makes."""
    if not conf.outbox_wake_on_commit():
        return
    # Django keeps this transaction's callbacks as (savepoint ids, callback, robust).
    if any(entry[1] is wake_relay for entry in connection.run_on_commit):
        return
    transaction.on_commit(wake_relay)


_relay_waker = Waker(
    task=TaskName.RELAY_BATCH,
    enabled=conf.outbox_wake_on_commit,
)


def wake_relay() -> None:
    """Queue one relay batch after commit (`agentrun.wakeup`); returns at once."""
    _relay_waker.wake()
