"""Recording outbox records in the event's own transaction (seed `appendEventWithLockedRun`).

This is the outbox module of the projection tier (SPEC §9.1): functions the `runs`
services call inside the run's transaction, in lock order (run → commands → session →
queue → key lock; the outbox key lock comes last), each named `*_locked`. A projection
module imports only the models, locks and versions of `runs` and of its own app, plus
`agentrun` (`tests/test_projection_layers.py`).

`record_outbox_locked` is not a service of its own: the runs event append calls it right
after it inserts a batch of events, inside the caller's transaction and under the run's row
lock, so the records commit or roll back with their events. Per call it takes one advisory
lock, draws one batch of sequence values and makes one bulk insert, whatever the number of
events, all in one statement (`outbox.locks.insert_outbox_records`). With the outbox
disabled it returns at once and writes nothing.

After commit, one Celery task per transaction wakes the relay (`outbox.relay_batch`), so a
record is picked up at once rather than at the next beat tick.
"""

from __future__ import annotations

from django.utils import timezone

from agentrun import conf
from agentrun.commit_hooks import on_commit_once
from agentrun.ids import new_id
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker
from outbox.cloudevents import cloud_event, message_headers, partition_key_for
from outbox.kafka import outbox_enabled, outbox_topic
from outbox.locks import insert_outbox_records
from runs.models import Event, Run


def record_outbox_locked(*, run: Run, events: list[Event]) -> list[int]:
    """Write one outbox record per event; returns their `outbox_seq` values. Needs the
    caller's transaction and run lock.

    Locks: the (topic, partition key) advisory lock, held to commit, taken before the
    sequence values are drawn (both in `insert_outbox_records`' one statement). Side
    effect after commit: the relay is woken.
    """
    if not events or not outbox_enabled():
        return []
    topic, key, source = outbox_topic(), partition_key_for(run), conf.kafka_source()
    records = [
        {
            "id": new_id("obx"),
            "event_id": event.id,
            "source_seq": event.seq,
            "value": cloud_event(run=run, event=event, partition_key=key, source=source),
            "headers": message_headers(run=run, event=event),
        }
        for event in events
    ]
    seqs = insert_outbox_records(
        topic=topic, partition_key=key, run_id=run.id, records=records, now=timezone.now()
    )
    if conf.outbox_wake_on_commit():
        on_commit_once(wake_relay)  # one per transaction, however many appends it makes
    return seqs


_relay_waker = Waker(task=TaskName.RELAY_BATCH, enabled=conf.outbox_wake_on_commit)


def wake_relay() -> None:
    """Queue one relay batch after commit (`agentrun.wakeup`); returns at once."""
    _relay_waker.wake()
