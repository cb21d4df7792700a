"""A Server-Sent Events client, Django-free: what `agentrun tail` (and the tests) read.

`open_stream` sends one GET with `Accept: text/event-stream` (and `Last-Event-ID` to resume);
`messages` parses the body as the SSE spec says: `id:`, `event:`, `data:` lines (several
`data:` lines joined by newlines) up to a blank line; comment lines (`:`) are heartbeats,
reported as `None` so a caller can tell an idle stream from a dead one.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Message:
    id: str | None
    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


class StreamRefused(Exception):
    """The server answered the stream request with an error (its status and body)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body[:300].decode(errors='replace')}")
        self.status = status
        self.body = body


def open_stream(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    last_event_id: str | None = None,
    timeout_s: float = 60.0,
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Connect and send the request; the connection and its 200 response (else
    `StreamRefused`). `timeout_s` bounds each read: above the heartbeat interval."""
    parts = urllib.parse.urlsplit(url)
    connection_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    connection = connection_class(parts.netloc, timeout=timeout_s)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    request_headers = {"Accept": "text/event-stream", **(headers or {})}
    if last_event_id is not None:
        request_headers["Last-Event-ID"] = last_event_id
    connection.request("GET", path, headers=request_headers)
    response = connection.getresponse()
    if response.status != 200:
        body = response.read()
        connection.close()
        raise StreamRefused(response.status, body)
    return connection, response


def messages(response: http.client.HTTPResponse) -> Iterator[Message | None]:
    """The messages of a stream until the server ends it; `None` for a comment line."""
    event_id: str | None = None
    event, data = "", list[str]()
    while True:
        raw = response.readline()
        if not raw:
            return  # the server closed the stream
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield Message(event_id, event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            yield None
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            event_id = value
        elif name == "event":
            event = value
        elif name == "data":
            data.append(value)
