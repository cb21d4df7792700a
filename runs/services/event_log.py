"""Appending events: the per-run log every other service writes through.

The seq of an event is `max(seq) + 1` read under the run's row lock, so seqs are gap-free
and unique per run however many writers race (seed `appendEventWithLockedRun`). Payloads
are redacted before they are stored. Each transaction that appends notifies
`agentrun_run_change` with `<run id>:<last seq>`; it is sent after the
commit (`runs.sql` says why), so a long-poll never sees an event that then rolls back. A
runner's append sends it in the COMMIT's own round trip (`commit_appends`); the others,
as an on-commit hook.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, transaction
from django.utils import timezone

from agentrun.errors import AgentRunError, conflict, stale_lease
from agentrun.ids import new_ids
from agentrun.metrics import count_events_on_commit
from agentrun.prepared_sql import default_connection
from agentrun.redaction import redact_json
from outbox.cloudevents import partition_key_for
from outbox.record import outbox_records_locked
from runs.locks import lock_run_for_append
from runs.models import RUNNER_EVENT_TYPES, Event, Run, RunStatus
from runs.services.fencing import (
    ended_run_reason,
    late_write_payload,
    refuses_output,
    stale_claim_reason,
)
from runs.sql import RUN_CHANGE_CHANNEL as RUN_CHANGE_CHANNEL  # re-exported: listeners use it
from runs.sql import (
    EventRow,
    commit_and_notify_runs_changed,
    event_committed,
    insert_events,
    notify_runs_changed,
    transaction_idle,
)
from webhooks.record import record_webhook_deliveries_locked

log = logging.getLogger("agentrun.runs")


@dataclass(frozen=True)
class NewEvent:
    type: str
    payload: dict[str, Any]


def append_event_locked(*, run: Run, type: str, payload: dict[str, Any]) -> Event:
    """Append one server-written event. Needs the caller's transaction and run lock."""
    return append_events_locked(run=run, events=[NewEvent(type, payload)])[0]


def append_events_locked(
    *, run: Run, events: list[NewEvent], runner_id: str | None = None
) -> list[Event]:
    """Append events in order with consecutive seqs. Needs the caller's run lock.

    `runner_id` is set when a runner wrote the events. A runner's output after the run
    was cancelled is kept but marked: it is stored as `backend_status {phase:
    late-write-rejected}` instead of as output (seed `fenceLateEventForCancelledRun`).
    """
    rows = _event_rows(run, events, runner_id=runner_id, now=timezone.now())
    _store([rows], prepare=runner_id is not None)
    return rows


@dataclass(frozen=True)
class RunEvents:
    run: Run
    events: list[NewEvent]


def append_events_to_runs_locked(
    *, batches: list[RunEvents], prepare: bool = False
) -> list[list[Event]]:
    """`append_events_locked` of server-written events for several runs at once (a batch
    settle, a service's `PendingEvents`): one read of the runs' last seqs, one INSERT, one
    NOTIFY statement, whatever the number of runs. Needs the caller's transaction and every
    run's lock; one entry per run. Returns the appended events per entry, in order.
    `prepare`: the events statement prepared, as a runner's append's, when it locks at
    most one session row (`_store`); for a caller whose transaction ends with it (a
    dispatch batch's settle, `dispatch.services.claims`)."""
    assert len({batch.run.id for batch in batches}) == len(batches), "one entry per run"
    now = timezone.now()
    appended = [_event_rows(batch.run, batch.events, now=now) for batch in batches if batch.events]
    _store(appended, prepare=prepare)
    return appended


class PendingEvents:
    """The server-written events of one service, collected per run while it writes and
    appended together at one well-defined point (normally its end) by `append_locked`:
    one read of the last seqs, one INSERT, one session touch and one NOTIFY for all of
    them, instead of those four statements per event.

    Per run, events keep the order they were added in and get consecutive seqs; runs are
    appended in the order they were first added, so a session's `last_event_seq` ends at
    the last run's, as it would after one append per event. Appending at the end also
    puts the outbox key lock last, where the lock order wants it. Needs the caller's
    transaction and the lock of every run added; a rollback drops what was collected
    together with everything else the transaction wrote.
    """

    def __init__(self) -> None:
        self._by_run: dict[str, RunEvents] = {}

    def add(self, run: Run, type: str, payload: dict[str, Any]) -> None:
        """Collect one event; its payload is built now, so it says what holds now."""
        self._by_run.setdefault(run.id, RunEvents(run, [])).events.append(NewEvent(type, payload))

    def append_locked(self) -> None:
        """Append everything collected so far (nothing when nothing was)."""
        batches, self._by_run = list(self._by_run.values()), {}
        if batches:
            append_events_to_runs_locked(batches=batches)


@contextmanager
def collecting(events: PendingEvents | None) -> Iterator[PendingEvents]:
    """The caller's pending events when it collects them; else new ones, appended when the
    block completes. So a `*_locked` helper called on its own appends its events itself,
    and one called by a service that collects appends them with the service's others."""
    if events is not None:
        yield events
        return
    own = PendingEvents()
    yield own
    own.append_locked()


def _event_rows(
    run: Run, events: list[NewEvent], *, now: datetime, runner_id: str | None = None
) -> list[Event]:
    """The events to append, each with its offset in the run's batch as a provisional seq
    (`_store` adds the run's last seq once the statement read it). Built as `from_db`
    builds a row (positional values in field order, the run cached as `Event(run=run)`
    caches it), with the ids minted together: the keyword constructor and an id each were
    half of this per event (issue 18, bench cell 3's batch settle)."""
    rows = []
    late = runner_id is not None and run.status == RunStatus.CANCELLED
    ids = new_ids("evt", len(events))
    for offset, (new, event_id) in enumerate(zip(events, ids, strict=True), start=1):
        event_type, payload = new.type, new.payload
        if late:
            event_type = "backend_status"
            payload = late_write_payload(
                run,
                source="event",
                runner_id=runner_id,
                reason="the run was cancelled",
                rejected_type=new.type,
                rejected_payload=new.payload,
            )
        event = _event_of_values(event_id, run.id, offset, event_type, redact_json(payload), now)
        _cache_run(event, run)
        rows.append(event)
    return rows


# `Event(*values)`: the values in field order (id, run_id, seq, type, payload, created_at).
_event_of_values: Callable[..., Event] = Event
_cache_run = Event.run.field.set_cached_value  # what `Event(run=run)` does with the run


def _store(per_run: list[list[Event]], *, prepare: bool = False) -> None:
    """Insert the events of one or more locked runs and record what follows from them, in
    the documented lock order: every session row first, then every outbox key lock (both
    in `insert_events`'s one statement). The other way round, two runs of one session
    deadlocked (tests/soak found it): an append held the key and waited for the session
    row that a finish of the session's other run held while it waited for the key to
    append its terminal event. `prepare`: a runner's append or a batch settle, whose
    statement is prepared (`runs.sql.insert_events`) when it locks at most one session."""
    per_run = [rows for rows in per_run if rows]
    if not per_run:
        return
    # A session records the last seq of the run appended to it last (dict order).
    session_runs = {rows[0].run.session_id: rows[0].run_id for rows in per_run}
    session_runs.pop(None, None)
    # Prepared, its plan is generic for the rest of the transaction (`runs.sql`), and a
    # generic plan may lock several session rows in the index's heap order, not in session
    # id order as the lock order wants: so only a statement that locks at most one.
    prepare = prepare and len(session_runs) <= 1
    # The outbox records go in the events' statement, their key locks after the session
    # rows (`outbox.locks.records_ctes`); built now, while each event's seq is its offset.
    outbox = outbox_records_locked(per_run)  # None when it is off
    inserted = insert_events(
        rows=[
            EventRow(event.id, event.run_id, event.seq, event.type, event.payload)
            for rows in per_run
            for event in rows
        ],
        session_runs=session_runs,  # type: ignore[arg-type]
        tenants=[rows[0].run.tenant_id for rows in per_run],
        now=per_run[0][0].created_at,
        extra_ctes=outbox,
        prepare=prepare,
    )
    alias = DEFAULT_DB_ALIAS  # `connection`'s, without a lookup
    for rows in per_run:
        last = inserted.last_seqs[rows[0].run_id]
        for event in rows:
            event.seq += last
            event._state.adding, event._state.db = False, alias  # as bulk_create
    # The partition keys that got records (the relay's LISTEN wake-up after commit).
    outboxed = sorted({partition_key_for(rows[0].run) for rows in per_run}) if outbox else []
    # Webhook deliveries: one INSERT … SELECT over the tenants' matching endpoints, after the
    # session rows are held (their locks order a session's deliveries; webhooks.models).
    # Skipped when the event statement found no endpoint that could match (`runs.sql`).
    if inserted.endpoints_may_match:
        record_webhook_deliveries_locked([event for rows in per_run for event in rows])
    if NOTIFY_ON_APPEND:
        last_seqs = {rows[0].run_id: rows[-1].seq for rows in per_run}
        sessions = {rows[0].run_id: rows[0].run.session_id or "" for rows in per_run}
        transaction.on_commit(_RunChanges(last_seqs, sessions, outboxed))
    count_events_on_commit(event.type for rows in per_run for event in rows)


# Whether appends send their `agentrun_run_change` notifications: always, except where
# bench cell 1 switches it off in its own process to measure what NOTIFY costs.
NOTIFY_ON_APPEND = True


class _RunChanges:
    """The after-commit notification of one `_store` (`runs.sql.notify_runs_changed` says
    why after): an on-commit hook, unless `commit_appends` sent it with the COMMIT. A
    failure is logged, not raised: the events are committed, and a waiter re-reads at its
    timeout."""

    def __init__(
        self, last_seqs: dict[str, int], sessions: dict[str, str], outbox_keys: list[str]
    ) -> None:
        self.last_seqs, self.sessions, self.outbox_keys = last_seqs, sessions, outbox_keys
        self.sent = False

    def __call__(self) -> None:
        if self.sent:
            return
        try:
            notify_runs_changed(
                self.last_seqs, sessions=self.sessions, outbox_keys=self.outbox_keys
            )
        except DatabaseError as error:
            log.warning("run-change notification not sent: %s", error)


def commit_appends() -> None:
    """Commit the caller's transaction together with its appends' notifications: one round
    trip (`runs.sql.commit_and_notify_runs_changed`) where Django's COMMIT and the
    on-commit NOTIFY were two. Call it as the *last* statement of a service's outermost
    `transaction.atomic` block; Django's commit at the block's end then finds nothing to
    send, and runs the other on-commit hooks as usual. Does nothing (Django commits) when
    the transaction appended nothing or the block is not the outermost one.

    If the statement fails, the COMMIT may or may not have taken: a read of the last
    appended event says which. Not committed: the error is raised and the block rolls
    back, as Django's own failed commit would. Committed: only the NOTIFY failed, which is
    logged, not raised, as after any commit (the caller's write succeeded)."""
    db = default_connection()  # one lookup, not one per attribute
    if len(db.atomic_blocks) != 1 or db.savepoint_ids:
        return
    hooks = [entry[1] for entry in db.run_on_commit]  # (savepoints, hook, robust)
    pending = [hook for hook in hooks if isinstance(hook, _RunChanges) and not hook.sent]
    if not pending:
        return
    last_seqs: dict[str, int] = {}
    sessions: dict[str, str] = {}
    keys: dict[str, None] = {}
    for hook in pending:  # in append order: a later append's seq wins
        last_seqs.update(hook.last_seqs)
        sessions.update(hook.sessions)
        keys.update(dict.fromkeys(hook.outbox_keys))
    try:
        commit_and_notify_runs_changed(db, last_seqs, sessions=sessions, outbox_keys=list(keys))
    except DatabaseError as error:
        # A failed COMMIT ended the transaction (idle); so did a failed NOTIFY after it.
        run_id, seq = next(iter(last_seqs.items()))
        if not transaction_idle() or not event_committed(run_id, seq):
            raise
        log.warning("run-change notification not sent: %s", error)
    for hook in pending:
        hook.sent = True


def fence_runner_write(
    run: Run, *, runner_id: str, lease_epoch: int, source: str, **refused: Any
) -> AgentRunError | None:
    """Check a runner write against the live claim of a locked run.

    Returns None when the write may proceed. Otherwise records the refusal as a
    `late-write-rejected` event and returns the 409 `stale_lease` error, which the service
    raises *after* its transaction commits so that the record is kept.
    """
    reason = stale_claim_reason(run, runner_id=runner_id, lease_epoch=lease_epoch)
    if reason is None:
        return None
    payload = late_write_payload(
        run,
        source=source,
        runner_id=runner_id,
        reason=reason,
        refused_lease_epoch=lease_epoch,
        claimed_by=run.claimed_by,
        **refused,
    )
    append_event_locked(run=run, type="backend_status", payload=payload)
    log.warning(
        "stale runner write refused",
        extra={"run_id": run.id, "runner_id": runner_id, "source": source, "reason": reason},
    )
    return stale_lease(
        f"run {run.id}: {reason}",
        run_id=run.id,
        runner_id=runner_id,
        lease_epoch=lease_epoch,
        current_lease_epoch=run.lease_epoch,
    )


def _fence_ended_run(run: Run, *, runner_id: str, **refused: Any) -> AgentRunError | None:
    """Record and return the 409 for output to a run that ended other than by a cancel."""
    if not refuses_output(run):
        return None
    reason = ended_run_reason(run)
    payload = late_write_payload(run, source="events", runner_id=runner_id, reason=reason)
    append_event_locked(run=run, type="backend_status", payload=payload | refused)
    log.warning("runner output after the run ended refused", extra={"run_id": run.id})
    return conflict(
        f"run {run.id}: {reason}", code="run_terminal", run_id=run.id, status=run.status
    )


def append_runner_events(
    *,
    run_id: str,
    runner_id: str,
    lease_epoch: int,
    events: list[NewEvent],
    runner_key_digest: str | None = None,
) -> list[Event]:
    """Append a runner's batch atomically: all of it or nothing.

    Locks: the run row. Errors: 404 unknown run; 409 `stale_lease` when the runner does not
    hold the current claim (the refused batch is recorded as `late-write-rejected`). The API
    rejects unknown and server-only event types with a 400 before this is called.
    `runner_key_digest`: the request's key is checked in the run lock's own statement
    (`runs.locks.lock_run_for_append`; `KeyDoesNotHoldRun`, nothing written, if not).
    """
    assert all(event.type in RUNNER_EVENT_TYPES for event in events)
    with transaction.atomic(durable=True):
        run = lock_run_for_append(run_id, key_digest=runner_key_digest)
        refused = {"rejected_types": [event.type for event in events]}
        refusal = fence_runner_write(
            run, runner_id=runner_id, lease_epoch=lease_epoch, source="events", **refused
        ) or _fence_ended_run(run, runner_id=runner_id, **refused)
        appended = (
            [] if refusal else append_events_locked(run=run, events=events, runner_id=runner_id)
        )
        commit_appends()  # the last statement: the COMMIT and the NOTIFY in one round trip
    if refusal:
        raise refusal
    return appended
