"""Recording outbox records in the event's own transaction (seed `appendEventWithLockedRun`).

This is the outbox module of the projection tier (SPEC §9.1): functions the `runs`
services call inside the run's transaction, in lock order (run → commands → session →
queue → key lock; the outbox key lock comes last), each named `*_locked`. A projection
module imports only the models, locks and versions of `runs` and of its own app, plus
`agentrun` (`tests/test_projection_layers.py`).

`outbox_records_locked` is not a service of its own: the runs event append calls it before
it inserts a batch of events, inside the caller's transaction and under the runs' row
locks, and puts what it returns into the events' own statement (`runs.sql.insert_events`),
so the records commit or roll back with their events and cost no round trip: the key
locks, one batch of sequence values and one bulk insert, whatever the number of events
(`outbox.locks.records_ctes`). With the outbox disabled it returns None at once.

After commit, one Celery task per transaction wakes the relay (`outbox.relay_batch`), so a
record is picked up at once rather than at the next beat tick.
"""

from __future__ import annotations

from typing import Any

from agentrun import conf
from agentrun.commit_hooks import on_commit_once
from agentrun.ids import new_id
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker
from outbox.cloudevents import cloud_event, message_headers, partition_key_for
from outbox.kafka import outbox_enabled, outbox_topic
from outbox.locks import records_ctes
from runs.models import Event


def outbox_records_locked(per_run: list[list[Event]]) -> tuple[str, dict[str, Any]] | None:
    """The CTEs (and their parameters) that write one outbox record per event of
    `per_run` (each list one run's new events, their `seq` still the offset in the batch)
    in the events' statement; None when the outbox is off or there is nothing to record.
    Needs the caller's transaction and run locks.

    Locks (in that statement): each (topic, partition key) advisory lock, in key order and
    after the session rows, held to commit, taken before the sequence values are drawn.
    Side effect after commit: the relay is woken.
    """
    per_run = [rows for rows in per_run if rows]
    if not per_run or not outbox_enabled():
        return None
    topic, source = outbox_topic(), conf.kafka_source()
    keys: dict[str, None] = {}
    records = []
    # Key order (stable: runs of one key keep theirs), each run's events in seq order.
    for rows in sorted(per_run, key=lambda rows: partition_key_for(rows[0].run)):
        run = rows[0].run
        key = partition_key_for(run)
        keys[key] = None
        records += [
            {
                "id": new_id("obx"),
                "event_id": event.id,
                "run_id": run.id,
                "k": event.seq,
                "partition_key": key,
                "value": cloud_event(run=run, event=event, partition_key=key, source=source),
                "headers": message_headers(run=run, event=event),
            }
            for event in rows
        ]
    if conf.outbox_wake_on_commit():
        on_commit_once(wake_relay)  # one per transaction, however many appends it makes
    return records_ctes(topic=topic, keys=list(keys), records=records)


_relay_waker = Waker(task=TaskName.RELAY_BATCH, enabled=conf.outbox_wake_on_commit)


def wake_relay() -> None:
    """Queue one relay batch after commit (`agentrun.wakeup`); returns at once."""
    _relay_waker.wake()
