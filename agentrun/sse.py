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
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, NamedTuple

from django.http import StreamingHttpResponse

from agentrun import conf
from agentrun.errors import invalid

log = logging.getLogger("agentrun.streams")
MEDIA_TYPE = "text/event-stream"


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
    try:
        async for chunk in source:
            watchdog = loop.call_later(send_timeout, slow_reader)
            try:
                yield chunk  # the server writes it before asking for the next one
            finally:
                watchdog.cancel()
    finally:
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
