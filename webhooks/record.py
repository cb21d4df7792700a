"""Recording webhook deliveries in the event's own transaction (issue 21, SPEC §9.5).

This is the webhooks module of the projection tier (SPEC §9.1), beside `outbox.record`: the
runs event append calls `record_webhook_deliveries_locked` once per append, inside its
transaction, after it touched the session rows (whose row locks, held to commit, order the
deliveries of one session: see `webhooks.models`). One statement, whatever the number of
events and endpoints: an `INSERT … SELECT` over the events and their tenants' enabled
endpoints that match each event's type. A tenant with no endpoint costs one index probe
that finds nothing, and no wake-up is sent.

It imports only its own app's models and SQL and `agentrun` (`tests/test_projection_layers.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentrun import conf
from agentrun.commit_hooks import on_commit_once
from agentrun.task_queues import TaskName
from agentrun.wakeup import Waker
from runs.models import Event
from webhooks.sql import insert_deliveries


def record_webhook_deliveries_locked(events: Sequence[Event]) -> int:
    """Write one delivery per (event, matching enabled endpoint of the event's tenant), in
    event order. Needs the caller's transaction, its run locks and (for runs of a session)
    the session row lock. Returns how many were written; after commit the relay is woken
    when there were any."""
    if not events:
        return 0
    written = insert_deliveries(
        event_ids=[event.id for event in events],
        event_types=[event.type for event in events],
        run_ids=[event.run.id for event in events],
        tenant_ids=[event.run.tenant_id for event in events],
        keys=[f"{event.run.tenant_id}:{event.run.session_id or event.run.id}" for event in events],
    )
    if written and conf.webhook_wake_on_commit():
        on_commit_once(wake_webhook_relay)  # one per transaction, however many appends
    return written


_relay_waker = Waker(task=TaskName.WEBHOOK_RELAY_BATCH, enabled=conf.webhook_wake_on_commit)


def wake_webhook_relay() -> None:
    """Queue one webhook relay batch (`agentrun.wakeup`); returns at once."""
    _relay_waker.wake()
