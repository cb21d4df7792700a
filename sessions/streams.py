"""The session stream (SPEC §9.2): every event of a session's runs, across turns.

`session_stream` is an async generator of `StreamEvent(id="<run id>:<seq>", type, data)` and
`None` (nothing new for a heartbeat interval). `data` is the event as `GET
/runs/{id}/events` returns it (it carries `run_id` and `seq`). Reuse it to serve another
shape (the OpenAI Agents API layer re-shapes each event): iterate, map, frame.

Order: the session's runs in admission order (`created_at`, then id; a run's `created_at`
is taken under the session's row lock, so turns of one session are ordered as admitted),
and each run's events in seq order up to and including its `terminal_status` event; then
the next run. A run's log is gap-free and its end is its terminal event, so the order is
a fixed sequence and resuming after any id is exact, across run boundaries too. (What the
server records on a run after its end, `late-write-rejected` notes, is in that run's own
stream with `follow=true`, not here: it would have no fixed place among the next run's.)

`output_only` keeps what the output endpoint shows (`sessions.selectors.OUTPUT_EVENT_TYPES`);
its ids are the same ids, so a cursor from one works on the other.

Waiting holds no database connection: the stream registers with the process's LISTEN
listener for any notification of the session's runs *before* it reads a page
(runs/waiting.py), reads in a pool slot (`runs.streams.read_page`), and awaits. It stays
open while the session exists (checked at each idle heartbeat).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.fields.json import KT

from agentrun import conf
from agentrun.errors import invalid
from agentrun.metrics import STREAMS_OPEN
from agentrun.sse import StreamEvent
from runs.models import Event, EventType, Run
from runs.streams import PAGE_SIZE, event_data, read_page
from runs.waiting import run_change_listener
from sessions.models import Session
from sessions.selectors import OUTPUT_EVENT_TYPES

SESSION_STREAM_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}:[0-9]{1,10}"  # `<run id>:<seq>`
LISTEN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Position:
    """Where a session stream stands: after `seq` of `run_id` (None: before every run)."""

    run_id: str | None = None
    seq: int = 0


def parse_position(session_id: str, cursor: str | None) -> Position:
    """The position after a stream id `<run id>:<seq>` of this session (a 400 if the run is
    not the session's); the start for None. Sync: call it in the request's thread."""
    if not cursor:
        return Position()
    run_id, _, seq = cursor.rpartition(":")
    if not _runs_of(session_id).filter(pk=run_id).exists():
        raise invalid(f"Last-Event-ID: run {run_id} is not a run of session {session_id}")
    return Position(run_id, int(seq))


@dataclass
class _Runs:
    """What a stream learnt of its session's runs: their order keys and terminal seqs."""

    created: dict[str, tuple[datetime, str]] = field(default_factory=dict)
    terminal: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionPage:
    events: list[dict[str, Any]]
    position: Position
    full: bool  # a page's worth: read again before waiting


def _runs_of(session_id: str) -> QuerySet[Run]:
    """The session's runs, by the expression `agentrun_runs_sess_order_idx` is built on."""
    return Run.objects.annotate(sid=KT("session_ref__session_id")).filter(sid=session_id)


def _next_run(session_id: str, after: tuple[datetime, str] | None) -> Run | None:
    runs = _runs_of(session_id)
    if after is not None:
        created_at, run_id = after
        runs = runs.filter(Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=run_id))
    return runs.only("id", "created_at").order_by("created_at", "id").first()


def _terminal_seq(run_id: str, known: _Runs) -> int | None:
    if run_id not in known.terminal:
        seq = (
            Event.objects.filter(run_id=run_id, type=EventType.TERMINAL_STATUS)
            .order_by("seq")
            .values_list("seq", flat=True)
            .first()
        )
        if seq is None:
            return None
        known.terminal[run_id] = seq
    return known.terminal[run_id]


def _current(session_id: str, position: Position, known: _Runs) -> Position | None:
    """The position to read from: `position`, or the start of the next run once the current
    one has been read to its end (None: no run to read yet)."""
    while True:
        if position.run_id is None:
            run = _next_run(session_id, None)
        else:
            terminal = _terminal_seq(position.run_id, known)
            if terminal is None or position.seq < terminal:
                return position
            if position.run_id not in known.created:
                run = Run.objects.only("id", "created_at").get(pk=position.run_id)
                known.created[run.id] = (run.created_at, run.id)
            run = _next_run(session_id, known.created[position.run_id])
        if run is None:
            return None
        known.created[run.id] = (run.created_at, run.id)
        position = Position(run.id, 0)


def session_page(
    *, session_id: str, position: Position, output_only: bool, known: _Runs
) -> SessionPage:
    """The events after `position` (sync; `read_page` runs it): the rest of the current
    run up to its end, then the next runs', a page at most."""
    events: list[dict[str, Any]] = []
    while len(events) < PAGE_SIZE:
        current = _current(session_id, position, known)
        if current is None:
            break
        position = current
        run_id = current.run_id
        assert run_id is not None
        terminal = known.terminal.get(run_id)
        rows = Event.objects.filter(run_id=run_id, seq__gt=current.seq)
        if terminal is not None:
            rows = rows.filter(seq__lte=terminal)
        if output_only:
            rows = rows.filter(type__in=OUTPUT_EVENT_TYPES)
        page = list(rows.order_by("seq")[: PAGE_SIZE - len(events)])
        events += [event_data(event) for event in page]
        if page:
            position = Position(run_id, page[-1].seq)
        if terminal is None:
            break  # the run goes on: wait for it
        if len(events) < PAGE_SIZE:
            position = Position(run_id, terminal)  # read to its end (output only: the rest)
    return SessionPage(events, position, len(events) >= PAGE_SIZE)


def _session_exists(*, session_id: str) -> bool:
    return Session.objects.filter(pk=session_id).exists()


async def session_stream(
    *, session_id: str, position: Position, output_only: bool = False, wait: bool = True
) -> AsyncIterator[StreamEvent | None]:
    """The session's events after `position`, then new ones, across turns (module doc).
    `wait` False: what is there now, then the end (a WSGI server cannot hold a stream)."""
    heartbeat_s = conf.stream_heartbeat_s()
    listener = run_change_listener() if wait else None
    known = _Runs()
    with STREAMS_OPEN.track_inprogress():
        while True:
            # Registered before the read: whatever commits after the read began wakes it.
            waiter = (
                await listener.register_session_async(session_id, timeout_s=LISTEN_TIMEOUT_S)
                if listener is not None
                else None
            )
            try:
                read = partial(
                    session_page,
                    session_id=session_id,
                    position=position,
                    output_only=output_only,
                    known=known,
                )
                page = await read_page(read, in_request_thread=not wait)
                position = page.position
                for data in page.events:
                    yield StreamEvent(f"{data['run_id']}:{data['seq']}", data["type"], data)
                if page.full:
                    continue
                if waiter is None or waiter.future is None:
                    return  # not waiting: what there was is sent
                if not waiter.found.is_set():
                    await asyncio.wait([waiter.future], timeout=heartbeat_s)
                woken = waiter.found.is_set()
            finally:
                if listener is not None and waiter is not None:
                    listener.unregister_session(waiter)
            if not woken:
                if not await read_page(partial(_session_exists, session_id=session_id)):
                    return  # the session was deleted: nothing more will come
                yield None
