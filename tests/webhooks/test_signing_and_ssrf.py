"""Signatures and target safety.

- Every delivery verifies with the `standardwebhooks` library's own `Webhook.verify` and
  the endpoint's secret; with a wrong secret verification fails. After a rotation the old
  secret still verifies during its grace period.
- SSRF: with `AGENTRUN_WEBHOOK_ALLOW_PRIVATE` off, targets resolving to loopback, private,
  link-local (metadata) or `[::1]` addresses are refused at registration and at send
  time; a host that resolved to a public address when it was registered and resolves to
  127.0.0.1 when the relay sends (DNS rebinding) gets nothing, and the connection goes to
  the address that was checked, resolved once.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper
from rest_framework.test import APIClient
from standardwebhooks import Webhook, WebhookVerificationError

from tests.webhooks.helpers import append_logs, register, relay_until_idle, session_run
from tests.webhooks.receiver import Receiver
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services.relay import relay_webhook_batch
from webhooks.services.secrets import new_secret

pytestmark = pytest.mark.django_db


def test_every_delivery_verifies_with_the_library_and_a_wrong_secret_fails(
    client_api: APIClient, receiver: Receiver
) -> None:
    made = register(client_api, receiver.url, ["log"])
    receiver.secret = made["secret"]
    events = append_logs(session_run("sess-sign"), 3)
    relay_until_idle()
    got = receiver.snapshot()
    assert [r.webhook_id for r in got] == [e.id for e in events]
    assert all(r.verified for r in got)
    first = got[0]
    assert first.body["id"] == events[0].id and first.body["specversion"] == "1.0"
    assert first.body["type"] == "agentrun.event.log" and first.body["data"]["seq"] == events[0].seq
    assert first.headers["webhook-signature"].startswith("v1,")
    raw = json.dumps(first.body, separators=(",", ":")).encode()
    Webhook(made["secret"]).verify(raw, first.headers)  # the body is sent exactly so
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(raw, first.headers)


def test_a_rotated_out_secret_still_verifies_during_its_grace_period(
    client_api: APIClient, receiver: Receiver
) -> None:
    made = register(client_api, receiver.url, ["log"])
    rotated = client_api.post(f"/api/v1/webhooks/{made['id']}/rotate-secret").json()
    receiver.secret = made["secret"]  # a receiver that has not switched yet
    append_logs(session_run("sess-rot"), 1)
    relay_until_idle()
    (got,) = receiver.snapshot()
    assert got.verified and len(got.headers["webhook-signature"].split(" ")) == 2
    raw = json.dumps(got.body, separators=(",", ":")).encode()
    Webhook(rotated["secret"]).verify(raw, got.headers)


REFUSED = [
    "http://127.0.0.1:8080/hook",
    "http://10.1.2.3/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]:8080/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://192.168.1.10/hook",
    "http://localhost/hook",
]


@pytest.mark.parametrize("url", REFUSED)
def test_private_targets_are_refused_at_registration(
    client_api: APIClient, settings: SettingsWrapper, url: str
) -> None:
    settings.AGENTRUN_WEBHOOK_ALLOW_PRIVATE = False
    response = client_api.post(
        "/api/v1/webhooks", {"url": url, "event_types": ["*"]}, format="json"
    )
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["message"].startswith("url: ")
    assert not WebhookEndpoint.objects.exists()


def test_http_needs_the_operator_setting(client_api: APIClient, settings: SettingsWrapper) -> None:
    settings.AGENTRUN_WEBHOOK_ALLOW_HTTP = False
    body = {"url": "http://127.0.0.1:9/", "event_types": ["*"]}
    response = client_api.post("/api/v1/webhooks", body, format="json")
    assert response.status_code == 400 and "https" in response.json()["error"]["message"]


@pytest.mark.parametrize("url", REFUSED[:4])
def test_private_targets_are_refused_at_send_time(
    client_api: APIClient, settings: SettingsWrapper, url: str
) -> None:
    register(client_api, url, ["log"])  # registered while private targets were allowed
    settings.AGENTRUN_WEBHOOK_ALLOW_PRIVATE = False
    append_logs(session_run("sess-ssrf"), 1)
    result = relay_webhook_batch()
    assert result.failed == 1 and result.delivered == 0
    delivery = WebhookDelivery.objects.get()
    assert delivery.last_error.startswith("refused: ") and delivery.last_status_code is None


class _Resolver:
    """A DNS that answers `answers` in turn for `rebind.test` (then the last one again)."""

    def __init__(self, answers: list[str]) -> None:
        self.answers, self.calls = answers, 0
        self.real = socket.getaddrinfo

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return self.real(host, port, *args, **kwargs)
        address = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]


def test_dns_rebinding_to_loopback_is_refused_at_send_time(
    client_api: APIClient, settings: SettingsWrapper, receiver: Receiver, monkeypatch: Any
) -> None:
    settings.AGENTRUN_WEBHOOK_ALLOW_PRIVATE = False
    resolver = _Resolver(["93.184.216.34", "127.0.0.1"])  # public at registration only
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    register(client_api, f"http://rebind.test:{receiver.port}/hook", ["log"])
    append_logs(session_run("sess-rebind"), 1)
    result = relay_webhook_batch()
    assert result.failed == 1 and receiver.snapshot() == []
    error = WebhookDelivery.objects.get().last_error
    assert "a loopback address" in error and "127.0.0.1" not in error


def test_the_connection_goes_to_the_address_that_was_checked(
    client_api: APIClient, receiver: Receiver, monkeypatch: Any
) -> None:
    """Resolved once per send: a second lookup (by a client that resolves again when it
    connects) would get an address where nothing listens."""
    resolver = _Resolver(["127.0.0.1", "127.0.0.1", "127.0.0.2"])
    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    url = f"http://rebind.test:{receiver.port}/hook"
    receiver.secret = register(client_api, url, ["log"])["secret"]
    append_logs(session_run("sess-pin"), 1)
    assert relay_webhook_batch().delivered == 1, WebhookDelivery.objects.get().last_error
    assert resolver.calls == 2  # registration, then the send's one check
    assert receiver.snapshot()[0].headers["host"] == f"rebind.test:{receiver.port}"
