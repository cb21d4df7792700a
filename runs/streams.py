"""The run stream (SPEC §9.2): a run's events from a cursor on, as `StreamEvent`s.

`run_stream` is an async generator of `StreamEvent(id=str(seq), type, data)` and `None`
(nothing new for a heartbeat interval); `data` is the event exactly as `GET
/runs/{id}/events` returns it, so a stream and the long-poll can be mixed freely, one cursor
for both. `agentrun.sse` frames it for HTTP; another surface (sessions/streams.py, an API
compatibility layer) may re-shape each event instead.

It holds no database connection while it waits: a page is read in a worker thread of the
loop's executor, within one of the loop's read slots (`runs.waiting.reread_slot`), and the
connection goes back to the pool before the slot is released; between pages it awaits the
process's one LISTEN listener (`runs.waiting.await_event`). The run's log is gap-free
per run, so resuming after any seq is exact.

Without `follow`, the stream ends after the run's `terminal_status` event (or at once when
the cursor is past it already); with `follow`, it stays open (runner output the server
keeps after the end, `late-write-rejected` records, comes too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from agentrun import conf
from agentrun.metrics import STREAMS_OPEN
from agentrun.sse import StreamEvent
from runs.api.outputs import EventOut
from runs.models import Event, EventType
from runs.waiting import await_event, release_connection, reread_slot

PAGE_SIZE = 200  # events per read: what one stream holds in memory at most
RUN_STREAM_ID = r"[0-9]{1,10}"  # a run stream's `Last-Event-ID`: a seq
T = TypeVar("T")


async def read_page(read: Callable[[], T], *, in_request_thread: bool = False) -> T:
    """`read()` (a `functools.partial` of a sync read, so mypy checks its arguments) in the
    loop's executor within a read slot; its connection back in the pool before the slot is
    given up (a short read, never a wait). `in_request_thread`: in the request's own thread
    instead (WSGI: a test's transaction is seen there only)."""

    def released() -> T:
        try:
            return read()
        finally:
            release_connection()

    async with reread_slot():
        # Not thread-sensitive: the read needs no request thread (nor keeps one alive).
        return await sync_to_async(released, thread_sensitive=in_request_thread)()


def event_data(event: Event) -> dict[str, Any]:
    """An event as the events API shows it (`GET /runs/{id}/events` items)."""
    return dict(EventOut(event).data)


@dataclass(frozen=True)
class RunPage:
    events: list[dict[str, Any]]
    ended: bool  # nothing more for a stream without `follow`: the cursor is past the end


def run_page(*, run_id: str, after_seq: int, follow: bool, limit: int = PAGE_SIZE) -> RunPage:
    """The events after `after_seq` (sync; `read_page` runs it)."""
    events = list(Event.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")[:limit])
    ended = False
    if not events and not follow:
        ended = Event.objects.filter(
            run_id=run_id, type=EventType.TERMINAL_STATUS, seq__lte=after_seq
        ).exists()
    return RunPage([event_data(event) for event in events], ended)


async def run_stream(
    *, run_id: str, after_seq: int, follow: bool = False, wait: bool = True
) -> AsyncIterator[StreamEvent | None]:
    """A run's events after `after_seq`, then new ones as they are appended (module doc).
    `wait` False: what is there now, then the end (a WSGI server cannot hold a stream)."""
    heartbeat_s = conf.stream_heartbeat_s()
    cursor = after_seq
    with STREAMS_OPEN.track_inprogress():
        read = True
        while True:
            if read:
                page = await read_page(
                    partial(run_page, run_id=run_id, after_seq=cursor, follow=follow),
                    in_request_thread=not wait,
                )
                for data in page.events:
                    cursor = data["seq"]
                    yield StreamEvent(str(cursor), data["type"], data)
                    if data["type"] == EventType.TERMINAL_STATUS and not follow:
                        return
                if page.ended:
                    return
                if len(page.events) >= PAGE_SIZE:
                    continue  # more is there already
                if not wait:
                    return
            read = await await_event(run_id=run_id, after_seq=cursor, timeout_s=heartbeat_s)
            if not read:
                yield None  # idle: a heartbeat
