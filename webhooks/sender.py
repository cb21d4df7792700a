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


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a fixed, already checked address; certificate checked against the host."""

    def __init__(self, target: Target, deadline: _Deadline) -> None:
        super().__init__(target.host, target.port, timeout=deadline.left())
        self._target, self._deadline = target, deadline

    def connect(self) -> None:
        sock = socket.create_connection((self._target.address, self.port), self._deadline.left())
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, target: Target, deadline: _Deadline) -> None:
        super().__init__(target.host, target.port, timeout=deadline.left())
        self._target, self._deadline = target, deadline

    def connect(self) -> None:
        self.sock = socket.create_connection(
            (self._target.address, self.port), self._deadline.left()
        )


def send_webhook(*, url: str, body: bytes, headers: dict[str, str]) -> Attempt:
    """Resolve and check the URL now, POST the body to the checked address, read a bounded
    part of the answer. Never raises for a network or policy failure: it is the attempt's
    outcome."""
    deadline = _Deadline(conf.webhook_timeout_s())
    try:
        target = resolve_target(url)
    except TargetRefused as refused:
        return Attempt(False, None, "", f"refused: {refused}")
    kind = _PinnedHTTPSConnection if target.scheme == "https" else _PinnedHTTPConnection
    connection = kind(target, deadline)
    try:
        return _exchange(connection, target, body, headers, deadline)
    except (OSError, http.client.HTTPException, ssl.SSLError) as error:
        return Attempt(False, None, "", f"{type(error).__name__}: {error}"[:500])
    finally:
        connection.close()


def _exchange(
    connection: http.client.HTTPConnection,
    target: Target,
    body: bytes,
    headers: dict[str, str],
    deadline: _Deadline,
) -> Attempt:
    connection.request("POST", target.path, body=body, headers=headers)
    if connection.sock is not None:
        connection.sock.settimeout(deadline.left())
    response = connection.getresponse()
    text = _bounded_read(response, conf.webhook_max_response_bytes(), deadline, connection)
    ok = 200 <= response.status < 300
    error = "" if ok else f"HTTP {response.status}"
    return Attempt(ok, response.status, text, error)


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
        chunk = response.read1(limit - size) if hasattr(response, "read1") else b""
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")
