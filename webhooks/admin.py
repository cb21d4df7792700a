"""Admin for webhooks: endpoints (secrets hidden) and deliveries, read-only.

The relay owns every delivery column after the insert. "Retry now" calls
`webhooks.services.endpoints.retry_delivery_now` (an undelivered, unleased delivery becomes
due at once; later deliveries of its key still wait for it). The deliveries table grows
with traffic: its changelist never runs a full `COUNT(*)`.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from agentrun.admin_actions import Outcome, service_action
from agentrun.admin_console import ReadOnlyAdmin
from agentrun.admin_leased_rows import LeasedRowAdmin
from outbox.admin import OutboxStateFilter
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services.endpoints import retry_delivery_now


def _retry_now(request: HttpRequest, delivery: WebhookDelivery, reason: str) -> Outcome:
    if retry_delivery_now(seq=delivery.seq):
        return Outcome(True, "due now")
    return Outcome(False, "delivered already, or a relay worker is sending it")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant_id", "url", "enabled", "failing_since", "created_at"]
    list_filter = ["enabled", "created_at"]
    search_fields = ["=id", "=tenant_id", "url"]
    exclude = ["secret", "previous_secret"]


RETRY_NOW = service_action(
    name="retry_deliveries_now", description="Retry selected deliveries now", perform=_retry_now
)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(LeasedRowAdmin):
    list_display = [
        "seq",
        "endpoint",
        "partition_key",
        "run_link",
        "event_type",
        "state",
        "attempt_count",
        "last_status_code",
        "next_attempt_at",
        "delivered_at",
    ]
    # The outbox's state filter: a delivery has the same lease and outcome columns.
    list_filter = [OutboxStateFilter, "event_type", "created_at"]
    list_select_related = ["endpoint"]
    search_fields = ["=seq", "=event__id", "=run__id", "=partition_key", "=endpoint__id"]
    ordering = ["-seq"]
    actions = [RETRY_NOW]
