"""`sessions.events.stream`: the session stream (SPEC §9.2, `sessions.streams`) in the SDK's
event shapes, with `Last-Event-ID` resume as agentrun's extension.

The SDK subscribes before it submits input, and the stream shows live events: without a
cursor it starts after the session's last event so far. Each SDK event's `event_id` (and
SSE `id`) is the agentrun stream id of the event it came from, `<run id>:<seq>`, with
`.<k>` for the k-th further SDK event of that one (`turn.created` then `item.added` of a
user message: `run_…:3`, `run_…:3.1`). Sending one back as `Last-Event-ID` resumes right
after it, across runs, with no gap and no repeat.
"""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from agentrun.errors import invalid
from agentrun.sse import StreamEvent
from compat_openai.events_map import sdk_events
from runs.api.stream_views import sse_route
from runs.models import Event
from runs.streams import read_page
from sessions.streams import SESSION_STREAM_ID, Position, parse_position, session_stream

SDK_STREAM_ID = rf"({SESSION_STREAM_ID})(?:\.([0-9]{{1,3}}))?"


def resume_point(session_id: str, header: str | None) -> tuple[Position, str | None, int]:
    """Where a stream starts (sync): after the event `header` names (its stream id and the
    sub-events of it already seen), else after the session's last event so far."""
    if header:
        match = re.fullmatch(SDK_STREAM_ID, header)
        if match is None:
            raise invalid(f"Last-Event-ID: not an id of this stream: {header[:80]!r}")
        run_id, _, seq = match.group(1).rpartition(":")
        # From just before that event: its further SDK events may still be due.
        position = parse_position(session_id, f"{run_id}:{max(int(seq) - 1, 0)}")
        return position, match.group(1), int(match.group(2) or 0)
    last = (
        Event.objects.filter(run__session_ref__session_id=session_id)
        .order_by("-run__created_at", "-run_id", "-seq")
        .values_list("run_id", "seq")
        .first()
    )
    return (Position(last[0], last[1]) if last else Position()), None, 0


def _translate(*, data: dict[str, Any], session_id: str) -> list[tuple[str, dict[str, Any]]]:
    return sdk_events(data, session_id=session_id)


async def sdk_stream(
    *, session_id: str, position: Position, seen_id: str | None, seen_index: int
) -> AsyncIterator[StreamEvent | None]:
    """The SDK events of the session after `position`, skipping the sub-events up to
    `seen_index` of the event `seen_id` (the one a resume named)."""
    async for event in session_stream(session_id=session_id, position=position):
        if event is None:
            yield None
            continue
        mapped = await read_page(
            functools.partial(_translate, data=event.data, session_id=session_id)
        )
        for index, (kind, body) in enumerate(mapped):
            if event.id == seen_id and index <= seen_index:
                continue
            event_id = event.id if index == 0 else f"{event.id}.{index}"
            yield StreamEvent(event_id, kind, {"type": kind, "event_id": event_id, **body})


def sdk_sse_route(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """`sse_route` (the streams' async view) with the SDK's framing on its body.

    The SDK's SSE parser keeps the last `id:` it saw (as the spec says) and then dispatches
    every blank line after it, so a heartbeat comment would reach it as an event with empty
    data and fail its JSON decoding; a `retry:` hint alone does the same. So this stream
    sends neither `id:` lines nor the hint: the cursor is each event's `event_id`, which a
    client sends back as `Last-Event-ID`. Heartbeats stay (comments, harmless without an
    id), and so does the slow-reader watchdog of `agentrun.sse.body`, which paces this."""
    streaming = sse_route(drf_view)

    @functools.wraps(drf_view)
    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response: HttpResponseBase = await streaming(request, *args, **kwargs)
        if isinstance(response, StreamingHttpResponse):
            response.streaming_content = _sdk_framing(response.streaming_content)
        return response

    return view


async def _sdk_framing(chunks: Any) -> AsyncIterator[bytes]:
    """The chunks of `agentrun.sse.body` (one message each) without the hint and ids."""
    first = True
    async for chunk in chunks:
        if first:
            first = False
            if chunk.startswith(b"retry:"):
                continue
        if chunk.startswith(b"id: "):
            chunk = chunk.split(b"\n", 1)[1]
        yield chunk
