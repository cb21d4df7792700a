"""Operators: deliveries in the admin with a "retry now" action through the service, and
the webhook backlog, oldest pending and failing endpoints in `agentrun_status`, the status
dashboard and `/metrics`."""

from __future__ import annotations

import html
import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from pytest_django.fixtures import Settings as SettingsWrapper
from rest_framework.test import APIClient

from tests.webhooks.helpers import append_logs, register, session_run
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services.relay import relay_webhook_batch

pytestmark = pytest.mark.django_db
CHANGELIST = "/admin/webhooks/webhookdelivery/"


def _failing_backlog(client: APIClient) -> list[WebhookDelivery]:
    """Two deliveries of one key whose endpoint refuses connections (port 9: discard)."""
    register(client, "http://127.0.0.1:9/hook", ["log"])
    append_logs(session_run("sess-ops"), 2)
    assert relay_webhook_batch().failed == 1
    return list(WebhookDelivery.objects.order_by("seq"))


def test_retry_now_makes_a_failed_delivery_due_through_the_service(
    client_api: APIClient, settings: SettingsWrapper
) -> None:
    settings.AGENTRUN_WEBHOOK_BACKOFF_BASE_MS = settings.AGENTRUN_WEBHOOK_BACKOFF_CAP_MS = 600_000
    head, _ = _failing_backlog(client_api)
    head.refresh_from_db()
    assert head.next_attempt_at > timezone.now() and head.attempt_count == 1
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    page = staff.get(f"{CHANGELIST}?state=retrying")
    assert page.status_code == 200 and str(head.seq).encode() in page.content
    chosen = {"action": "retry_deliveries_now", "_selected_action": [str(head.seq)]}
    assert b"are you sure?" in staff.post(CHANGELIST, chosen).content
    done = staff.post(CHANGELIST, {**chosen, "confirmed": "yes"}, follow=True)
    assert "due now" in html.unescape(done.content.decode())
    head.refresh_from_db()
    assert head.next_attempt_at <= timezone.now()
    assert (
        staff.get(f"/admin/webhooks/webhookendpoint/{head.endpoint_id}/change/").status_code == 200
    )
    assert (
        WebhookEndpoint.objects.get().secret.encode()
        not in staff.get(f"/admin/webhooks/webhookendpoint/{head.endpoint_id}/change/").content
    )


def test_status_dashboard_and_metrics_show_the_webhook_backlog(
    client_api: APIClient, settings: SettingsWrapper
) -> None:
    settings.AGENTRUN_METRICS_BACKLOG_REFRESH_S = 0
    _failing_backlog(client_api)
    out = StringIO()
    call_command("agentrun_status", "--json", stdout=out)
    webhooks = json.loads(out.getvalue())["webhooks"]
    assert webhooks["backlog"] == 2 and webhooks["retrying"] == 1
    assert webhooks["failing_count"] == 1 and webhooks["oldest_pending_age_seconds"] is not None
    text = StringIO()
    call_command("agentrun_status", stdout=text)
    assert (
        "webhooks  1 endpoints: undelivered 2, retrying 1, failing endpoints 1" in text.getvalue()
    )

    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    dashboard = staff.get("/admin/status/").content.decode()
    assert 'id="webhooks"' in dashboard and "failing endpoints" in dashboard
    metrics = Client().get("/metrics").content.decode()
    assert "agentrun_webhook_backlog 2.0" in metrics
    assert "agentrun_webhook_failing_endpoints 1.0" in metrics
