"""A loopback webhook receiver for the tests: a real HTTP server on 127.0.0.1 that verifies
every request with the `standardwebhooks` library's own `Webhook.verify`, records what it
got, and can answer 500 for a while or be stopped and started again on the same port."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError


@dataclass(frozen=True)
class Received:
    webhook_id: str
    verified: bool
    body: dict[str, Any]
    headers: dict[str, str]
    answered: int

    @property
    def key(self) -> str:
        return str(self.body.get("partitionkey"))


@dataclass
class Receiver:
    """`fail_until`: a monotonic time before which every request gets a 500."""

    secret: str = ""
    port: int = 0
    fail_until: float = 0.0
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook?x=1"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real receivers allow

            def do_GET(self) -> None:  # the bench's read-back of a receiver process
                items = [[r.webhook_id, r.key, r.body["data"]["seq"], r.answered, r.verified]
                         for r in receiver.snapshot()]  # fmt: skip
                raw = json.dumps(items).encode()
                self.send_response(200)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_DELETE(self) -> None:
                with receiver.lock:
                    receiver.received.clear()
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                receiver.record(raw, headers, self)

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        server.allow_reuse_address = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def record(self, raw: bytes, headers: dict[str, str], handler: BaseHTTPRequestHandler) -> None:
        try:
            body = Webhook(self.secret).verify(raw, headers) if self.secret else json.loads(raw)
            verified = bool(self.secret)
        except WebhookVerificationError:
            body, verified = json.loads(raw), False
        failing = time.monotonic() < self.fail_until or not verified
        status = 500 if failing else 200
        with self.lock:
            self.received.append(
                Received(headers.get("webhook-id", ""), verified, body, headers, status)
            )
        try:
            handler.send_response(status)
            handler.send_header("content-length", "2")
            handler.end_headers()
            handler.wfile.write(b"ok")
        except (BrokenPipeError, ConnectionResetError):
            return  # the sender was killed mid-request (the SIGKILL test)

    def accepted_ids(self) -> list[str]:
        with self.lock:
            return [r.webhook_id for r in self.received if r.answered == 200]

    def snapshot(self) -> list[Received]:
        with self.lock:
            return list(self.received)


def main() -> None:
    """`python -m tests.webhooks.receiver SECRET`: a receiver process (the bench's), printing
    its port; GET / returns what it received, DELETE / forgets it."""
    import sys

    receiver = Receiver(secret=sys.argv[1]).start()
    print(receiver.port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
