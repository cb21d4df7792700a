"""One webhook request: signed per Standard Webhooks, sent to the address that was checked.

- The body is the event's CloudEvents envelope (the Kafka message value) as UTF-8 JSON; the
  signature covers exactly those bytes: `webhook-signature: v1,<base64 HMAC-SHA256 of
  "<webhook-id>.<webhook-timestamp>.<body>">`, computed by the `standardwebhooks` library
  (`Webhook.sign`), with a second `v1,…` while a rotated-out secret is in its grace period.
- The connection goes to `Target.address` (resolved and checked just before,
  `webhooks.targets`): TLS still verifies the certificate against the URL's host name (SNI),
  and `Host` names it, but DNS is asked only once, so rebinding cannot move the request.
- Redirects are not followed (a 3xx is a failure like any non-2xx); at most
  `AGENTRUN_WEBHOOK_MAX_RESPONSE_BYTES` of the response are read; the whole exchange must
  finish within `AGENTRUN_WEBHOOK_TIMEOUT_S` (each socket wait gets what is left of it).
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from standardwebhooks import Webhook

from agentrun import conf
from outbox.cloudevents import CONTENT_TYPE
from webhooks.targets import Target, TargetRefused, resolve_target

USER_AGENT = "agentrun-webhooks/1"
logger = logging.getLogger("webhooks.sender")
# How a kept-alive connection the server has closed fails on its next request.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
_FAILURES = (OSError, http.client.HTTPException, ssl.SSLError)


@dataclass(frozen=True)
class Attempt:
    """What one request came to: `ok` for a 2xx; otherwise why not."""

    ok: bool
    status_code: int | None
    response: str  # the first bytes of the body, decoded leniently
    error: str


def signature_header(*, secrets: list[str], msg_id: str, timestamp: datetime, body: str) -> str:
    """`v1,<sig>` per secret, space-separated (Standard Webhooks' rotation form)."""
    return " ".join(
        Webhook(secret).sign(msg_id=msg_id, timestamp=timestamp, data=body) for secret in secrets
    )


def signed_headers(*, secrets: list[str], msg_id: str, body: str) -> dict[str, str]:
    now = datetime.now(tz=UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature_header(
            secrets=secrets, msg_id=msg_id, timestamp=now, body=body
        ),
        "content-type": CONTENT_TYPE,
        "user-agent": USER_AGENT,
    }


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("the webhook request took longer than its total timeout")
        return left


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """HTTP to a fixed, already checked address (`target.address`); `deadline` is the
    current request's, read by `connect`."""

    def __init__(self, target: Target, deadline: _Deadline) -> None:
        super().__init__(target.host, target.port, timeout=deadline.left())
        self.target, self.deadline = target, deadline

    def connect(self) -> None:
        self.sock = self._open()

    def _open(self) -> socket.socket:
        sock = socket.create_connection((self.target.address, self.port), self.deadline.left())
        # http.client writes the head and the body in two sends: without NODELAY, Nagle holds
        # the body until the peer's (delayed) ACK of the head on a kept-alive connection.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock


class _PinnedHTTPSConnection(_PinnedHTTPConnection, http.client.HTTPSConnection):
    """HTTPS to the checked address; the certificate is checked against the URL's host."""

    def connect(self) -> None:
        context: ssl.SSLContext = self._context  # type: ignore[attr-defined]
        self.sock = context.wrap_socket(self._open(), server_hostname=self.target.host)


class Sender:
    """Sends requests to one URL, reusing one kept-alive connection while the server allows
    it (a relay batch sends a key's deliveries one after the other through one `Sender`).
    The host is resolved and checked when a connection is opened, at send time, and the
    connection goes to that checked address; a failure closes it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._connection: _PinnedHTTPConnection | None = None

    def send(self, *, body: bytes, headers: dict[str, str]) -> Attempt:
        """POST the body; never raises for a network or policy failure: it is the attempt's
        outcome. Each request has the whole total timeout to itself."""
        deadline = _Deadline(conf.webhook_timeout_s())
        if self._connection is not None:
            try:
                return self._try(body, headers, deadline)
            except _STALE as stale:
                # The server closed the idle kept-alive connection: once more on a new one
                # (a repeat, if it did get the request, carries the same `webhook-id`).
                logger.debug("webhook connection went stale: %s", stale)
                self.close()
            except _FAILURES as error:
                return self._failed(error)
        try:
            return self._try(body, headers, deadline)
        except TargetRefused as refused:
            return Attempt(False, None, "", f"refused: {refused}")
        except _FAILURES as error:
            return self._failed(error)

    def _try(self, body: bytes, headers: dict[str, str], deadline: _Deadline) -> Attempt:
        connection = self._connection or self._connect(deadline)
        attempt, reusable = _exchange(connection, body, headers, deadline)
        if not reusable:
            self.close()
        return attempt

    def _failed(self, error: Exception) -> Attempt:
        self.close()
        return Attempt(False, None, "", f"{type(error).__name__}: {error}"[:500])

    def _connect(self, deadline: _Deadline) -> _PinnedHTTPConnection:
        target = resolve_target(self.url)
        kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
        self._connection = kind(target, deadline)
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def send_webhook(*, url: str, body: bytes, headers: dict[str, str]) -> Attempt:
    """One request on a connection of its own (`Sender` for several in a row)."""
    sender = Sender(url)
    try:
        return sender.send(body=body, headers=headers)
    finally:
        sender.close()


def _exchange(
    connection: _PinnedHTTPConnection,
    body: bytes,
    headers: dict[str, str],
    deadline: _Deadline,
) -> tuple[Attempt, bool]:
    """The request and a bounded read of its answer; whether the connection may be reused
    (the server keeps it open and the whole body was read)."""
    connection.deadline = deadline  # a (re)connect inside `request` waits at most this
    if connection.sock is not None:
        connection.sock.settimeout(deadline.left())
    connection.request("POST", connection.target.path, body=body, headers=headers)
    if connection.sock is not None:
        connection.sock.settimeout(deadline.left())
    response = connection.getresponse()
    limit = conf.webhook_max_response_bytes()
    text = _bounded_read(response, limit, deadline, connection)
    ok = 200 <= response.status < 300
    error = "" if ok else f"HTTP {response.status}"
    # Reusable only when the whole body was read (a longer one is left unread) and the
    # server keeps the connection open.
    return Attempt(
        ok, response.status, text, error
    ), response.isclosed() and not response.will_close


def _bounded_read(
    response: http.client.HTTPResponse,
    limit: int,
    deadline: _Deadline,
    connection: http.client.HTTPConnection,
) -> str:
    """Up to `limit` bytes of the body, each read bounded by the time left."""
    chunks, size = [], 0
    while size < limit:
        if connection.sock is not None:
            connection.sock.settimeout(deadline.left())
        chunk = response.read1(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")
