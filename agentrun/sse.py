"""Server-Sent Events framing, written once for every stream (SPEC §9.2).

A stream is an async iterator of `StreamEvent` (id, event type, data dict) or `None`, which
means "nothing new for a heartbeat interval". `sse_response` frames it: a `retry:` hint
first, then `id:` / `event:` / `data:` per event (the data is one line of JSON: JSON escapes
newlines) and a comment line for each `None`, so proxies and browsers keep the connection.

The body is pulled, never pushed: the generator reads the next page of events only when
the server has written the previous chunk, so a slow reader costs at most one page and the
transport's write buffer (uvicorn pauses a send at its high-water mark). A reader that takes
no bytes for `AGENTRUN_STREAM_SEND_TIMEOUT_S` is disconnected with a log line: the watchdog
cancels the request's task, which the ASGI server answers by closing the connection.

A graceful stop of the server would otherwise wait its whole timeout for open streams
(they never end by themselves): one watcher per event loop notices uvicorn's exit flag and
ends every open stream at once; clients reconnect (the `retry:` hint) and resume exactly.
The watcher interrupts a stream's wait by cancelling its task, and the stream ends its
body there, so the response completes (the chunked body's last chunk is sent): a stream
left cancelled would be a cut response, logged by uvicorn as an ERROR per stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import weakref
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, NamedTuple

from django.http import StreamingHttpResponse

from agentrun import conf
from agentrun.errors import invalid

log = logging.getLogger("agentrun.streams")
MEDIA_TYPE = "text/event-stream"
EXIT_POLL_S = 0.25
_open_streams: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Task[object]]] = (
    weakref.WeakKeyDictionary()
)
# The streams' tasks the exit watcher cancelled: their cancellation ends the body.
_ended_by_stop: weakref.WeakSet[asyncio.Task[object]] = weakref.WeakSet()


def _server_exiting() -> bool:
    """Whether uvicorn was asked to stop: its SIGTERM handler is a bound method of its
    `Server`, whose `should_exit` flag says so (False outside uvicorn)."""
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(getattr(server, "should_exit", False))


async def _watch_exit(tasks: set[asyncio.Task[object]]) -> None:
    while tasks:
        if _server_exiting():
            log.info("server stopping: ending %d open streams", len(tasks))
            for task in list(tasks):
                _ended_by_stop.add(task)
                task.cancel()
            return
        await asyncio.sleep(EXIT_POLL_S)


def _track(task: asyncio.Task[object]) -> set[asyncio.Task[object]]:
    """Register a stream's task with its loop's exit watcher (started with the first)."""
    loop = task.get_loop()
    tasks = _open_streams.get(loop)
    if tasks is None or not tasks:
        tasks = _open_streams[loop] = {task}
        loop.create_task(_watch_exit(tasks))
    else:
        tasks.add(task)
    return tasks


class StreamEvent(NamedTuple):
    """One event of a stream: its SSE `id` (the resume cursor), `event` name and `data`."""

    id: str
    type: str
    data: dict[str, Any]


def frame(*, data: str, id: str | None = None, event: str | None = None) -> bytes:
    """One SSE message. `data` must hold no newline (JSON text does not)."""
    assert "\n" not in data and "\r" not in data, "one data line per event"
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


def encode(event: StreamEvent) -> bytes:
    text = json.dumps(event.data, separators=(",", ":"), ensure_ascii=False)
    return frame(id=event.id, event=event.type, data=text)


def comment(text: str) -> bytes:
    """A comment line: ignored by clients, it keeps the connection (the heartbeat)."""
    return f": {text}\n\n".encode()


def retry_hint(milliseconds: int) -> bytes:
    return f"retry: {milliseconds}\n\n".encode()


def last_event_id(header: str | None, *, pattern: str) -> str | None:
    """The `Last-Event-ID` header, checked against the stream's id shape (a 400 if not)."""
    if header is None or header == "":
        return None
    if not re.fullmatch(pattern, header):
        raise invalid(f"Last-Event-ID: not an id of this stream: {header[:80]!r}")
    return header


async def body(
    events: AsyncIterator[StreamEvent | None], *, label: str, retry_ms: int
) -> AsyncIterator[bytes]:
    """The bytes of a stream: the retry hint, events, heartbeats; see the module doc for
    the slow-reader watchdog. `label` names the stream in log lines."""
    task = asyncio.current_task()
    send_timeout = conf.stream_send_timeout_s()
    loop = asyncio.get_running_loop()

    def slow_reader() -> None:
        log.warning("stream %s: the reader took nothing for %ss; disconnected", label, send_timeout)
        if task is not None:
            task.cancel()

    async def chunks() -> AsyncGenerator[bytes]:
        yield retry_hint(retry_ms)
        async for event in events:
            yield comment("heartbeat") if event is None else encode(event)

    source = chunks()
    tracked = _track(task) if task is not None else set()
    try:
        async for chunk in source:
            watchdog = loop.call_later(send_timeout, slow_reader)
            try:
                yield chunk  # the server writes it before asking for the next one
            finally:
                watchdog.cancel()
    except asyncio.CancelledError:
        if task is None or task not in _ended_by_stop:
            raise  # a slow reader, a disconnect: the request ends here
        task.uncancel()  # the server is stopping: the body ends, the response completes
    finally:
        tracked.discard(task)
        await source.aclose()  # closes `events` too: its waiter is unregistered at once


def sse_response(
    events: AsyncIterator[StreamEvent | None], *, label: str, retry_ms: int | None = None
) -> StreamingHttpResponse:
    """A `text/event-stream` response for an ASGI server, not cached nor buffered."""
    retry = conf.stream_retry_ms() if retry_ms is None else retry_ms
    response = StreamingHttpResponse(
        body(events, label=label, retry_ms=retry), content_type=MEDIA_TYPE
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response
