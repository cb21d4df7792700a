"""What a send will not do: follow a redirect, read an unbounded body, or wait past its
total timeout (a receiver trickling its answer); and an endpoint failing for longer than
`AGENTRUN_WEBHOOK_DISABLE_AFTER_S` is disabled, logged, and sent nothing more. Each
receiver here is a real socket server on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper
from rest_framework.test import APIClient

from tests.webhooks.helpers import append_logs, register, session_run
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services.relay import relay_webhook_batch

pytestmark = pytest.mark.django_db


@contextmanager
def raw_server(answer: Callable[[socket.socket], None]) -> Iterator[str]:
    """A one-thread-per-connection server that reads a request's head, then `answer`s."""
    listener = socket.create_server(("127.0.0.1", 0))
    port, stop = listener.getsockname()[1], threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            try:
                answer(conn)
            except OSError:
                return  # the client gave up (the timeout test)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/hook"
    finally:
        stop.set()
        thread.join()
        listener.close()


def _send_one(client: APIClient, url: str) -> WebhookDelivery:
    register(client, url, ["log"])
    append_logs(session_run(f"sess-{time.monotonic_ns()}"), 1)
    relay_webhook_batch()
    return WebhookDelivery.objects.get()


def test_a_redirect_is_a_failure_and_is_not_followed(client_api: APIClient) -> None:
    followed = threading.Event()
    with raw_server(lambda conn: followed.set()) as elsewhere:

        def redirect(conn: socket.socket) -> None:
            conn.sendall(
                f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {elsewhere}\r\n"
                "Content-Length: 0\r\n\r\n".encode()
            )

        with raw_server(redirect) as url:
            delivery = _send_one(client_api, url)
    assert delivery.delivered_at is None and delivery.last_status_code == 307
    assert delivery.last_error == "HTTP 307" and not followed.is_set()


def test_only_a_bounded_part_of_the_response_is_read(
    client_api: APIClient, settings: SettingsWrapper
) -> None:
    settings.AGENTRUN_WEBHOOK_MAX_RESPONSE_BYTES = 1_000
    big = b"x" * 5_000_000

    def answer(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big)

    with raw_server(answer) as url:
        delivery = _send_one(client_api, url)
    assert delivery.delivered_at is not None and len(delivery.last_response) == 1_000


def test_the_whole_request_has_one_total_timeout(
    client_api: APIClient, settings: SettingsWrapper
) -> None:
    settings.AGENTRUN_WEBHOOK_TIMEOUT_S = 1.0

    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):  # a byte every 0.1 s: no single read waits 1 s
            conn.sendall(b"x")
            time.sleep(0.1)

    with raw_server(trickle) as url:
        started = time.monotonic()
        delivery = _send_one(client_api, url)
        took = time.monotonic() - started
    assert delivery.delivered_at is None and "timeout" in delivery.last_error.lower()
    assert took < 5, f"the send took {took:.1f}s"


def test_an_endpoint_failing_past_the_limit_is_disabled_and_logged(
    client_api: APIClient, settings: SettingsWrapper, caplog: pytest.LogCaptureFixture
) -> None:
    settings.AGENTRUN_WEBHOOK_DISABLE_AFTER_S = 0

    def fail(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\ndown")

    with caplog.at_level(logging.WARNING, logger="webhooks.relay"), raw_server(fail) as url:
        delivery = _send_one(client_api, url)
        assert relay_webhook_batch().claimed == 0  # nothing more goes to it
    endpoint = WebhookEndpoint.objects.get()
    assert not endpoint.enabled and "continuously" in endpoint.disabled_reason
    assert delivery.last_status_code == 503 and delivery.last_response == "down"
    assert "webhook endpoint disabled" in caplog.text
    enabled = client_api.patch(f"/api/v1/webhooks/{endpoint.id}", {"enabled": True}, format="json")
    assert enabled.json()["enabled"] is True and enabled.json()["failing_since"] is None
