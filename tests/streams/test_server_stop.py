"""A graceful stop of the server (SIGTERM to uvicorn, as `manage.py up` and Kubernetes
send it) ends every open stream with a complete response: the chunked body's last chunk
arrives before the connection closes, so a client knows the stream was ended, not cut,
and reconnects with `Last-Event-ID`; the server logs one line for the streams it ended
and no error per stream (before: uvicorn's "ASGI callable returned without completing
response" for each, and a body cut without its last chunk)."""

from __future__ import annotations

import socket

import pytest

from agentrun.auth import issue_api_key
from tests.builders import make_claimed_run
from tests.runtime.server import serving
from tests.streams.world import TENANT

CUT_RESPONSE = "ASGI callable returned without completing response"
LAST_CHUNK = b"\r\n0\r\n\r\n"


def open_raw_stream(port: int, path: str, secret: str) -> socket.socket:
    """The stream's request on a socket of its own, so the test sees the body's framing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n"
        f"Authorization: Bearer {secret}\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


def read_until(sock: socket.socket, received: bytearray, marker: bytes) -> None:
    while marker not in received:
        data = sock.recv(65536)
        assert data, f"closed before {marker!r}: {bytes(received)!r}"
        received += data


def read_to_end(sock: socket.socket, received: bytearray) -> None:
    while data := sock.recv(65536):
        received += data


@pytest.mark.django_db(transaction=True)
def test_a_server_stop_ends_each_open_stream_with_a_complete_response() -> None:
    runs = [make_claimed_run(runner_id="r1") for _ in range(2)]
    secret = issue_api_key(tenant_id=TENANT, role="client").secret
    with serving() as server:
        streams = []
        for run in runs:
            sock = open_raw_stream(server.port, f"/api/v1/runs/{run.id}/stream", secret)
            received = bytearray()
            read_until(sock, received, b"event: backend_status")  # the claim's: it is open
            streams.append((sock, received))

        server.process.terminate()
        for sock, received in streams:
            read_to_end(sock, received)
            sock.close()
            head = bytes(received).split(b"\r\n\r\n", 1)[0].lower()
            assert head.startswith(b"http/1.1 200") and b"transfer-encoding: chunked" in head
            assert bytes(received).endswith(LAST_CHUNK), bytes(received)[-200:]
        # uvicorn re-raises the signal it stopped for, once it has stopped.
        assert server.process.wait(timeout=60) in (0, -15)

    log = server.log_text()
    assert "server stopping: ending 2 open streams" in log, log
    assert CUT_RESPONSE not in log, log
