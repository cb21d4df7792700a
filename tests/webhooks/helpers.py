"""Builders of the webhook tests: endpoints through the API, runs and events through the
real services, and relaying until nothing is due."""

from __future__ import annotations

import time
from typing import Any

from rest_framework.test import APIClient

from runs.models import Run
from tests.outbox.builders import append_logs, claimed_run
from webhooks.models import WebhookDelivery
from webhooks.services.relay import relay_webhook_batch


def register(client: APIClient, url: str, event_types: list[str] | None = None) -> dict[str, Any]:
    response = client.post(
        "/api/v1/webhooks",
        {"url": url, "event_types": event_types or ["*"], "description": "test"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return dict(response.json())


def session_run(session_id: str, tenant_id: str = "tenant-a") -> Run:
    return claimed_run(tenant_id=tenant_id, session_id=session_id)


def relay_until_idle(timeout: float = 30) -> int:
    """Run relay batches in this process until no delivery is left undelivered and due."""
    deadline, sent = time.monotonic() + timeout, 0
    while WebhookDelivery.objects.filter(delivered_at__isnull=True).exists():
        assert time.monotonic() < deadline, "deliveries still undelivered"
        result = relay_webhook_batch()
        sent += result.delivered
        if not result.claimed:
            time.sleep(0.02)  # a retry's backoff (50-400 ms in these tests) is running
    return sent


__all__ = ["append_logs", "register", "relay_until_idle", "session_run"]
