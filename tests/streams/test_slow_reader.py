"""A reader that stops taking bytes is disconnected, with a log line, once the server's
write has waited `AGENTRUN_STREAM_SEND_TIMEOUT_S`: the stream is pulled, so what it holds
meanwhile is one page and the socket's buffers, never the backlog."""

from __future__ import annotations

import socket

import pytest

from agentrun.auth import issue_api_key
from runs.services.event_log import NewEvent, append_runner_events
from tests.builders import make_claimed_run
from tests.runtime.server import serving, wait_for

BIG = "x" * 200_000


@pytest.mark.django_db(transaction=True)
def test_a_reader_that_takes_nothing_is_disconnected_with_a_log_line() -> None:
    run = make_claimed_run(runner_id="r1")
    secret = issue_api_key(tenant_id="tenant-a", role="client").secret
    with serving(AGENTRUN_STREAM_SEND_TIMEOUT_S="1") as server:
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.connect(("127.0.0.1", server.port))
        request = (
            f"GET /api/v1/runs/{run.id}/stream?follow=true HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {secret}\r\n\r\n"
        )
        reader.sendall(request.encode())
        for _ in range(40):  # 8 MB of events that the reader never reads
            append_runner_events(
                run_id=run.id, runner_id="r1", lease_epoch=1, events=[NewEvent("log", {"t": BIG})]
            )
        wait_for(
            lambda: "took nothing for 1.0s; disconnected" in server.log_text(),
            within_s=60,
            what="the slow-reader log line",
        )
        # The server closed its side: reading on, the reader reaches the end of the stream.
        reader.settimeout(30)
        received = 0
        while chunk := reader.recv(1 << 20):
            received += len(chunk)
        reader.close()
        assert received < 40 * len(BIG)  # it never got the backlog
        assert server.request("GET", "/healthz").status == 200
