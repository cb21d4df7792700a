"""Reads of the webhooks app: endpoints in a scope, a page of an endpoint's deliveries, and
the operator status (backlog, oldest pending, failing endpoints).

The status aggregates undelivered rows only (the pending key index holds them), so it stays
cheap however many delivered rows are kept.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from agentrun.tenancy import Scope
from webhooks.models import WebhookDelivery, WebhookEndpoint


def endpoints_for(*, scope: Scope) -> QuerySet[WebhookEndpoint]:
    return scope.filter(WebhookEndpoint.objects.all()).order_by("created_at", "id")


def get_endpoint_for(*, scope: Scope, endpoint_id: str) -> WebhookEndpoint:
    """The endpoint if it is in scope, else 404 `webhook`."""
    return scope.get_or_404(WebhookEndpoint.objects.all(), endpoint_id, kind="webhook")


def deliveries_page(
    *, endpoint: WebhookEndpoint, limit: int, before_seq: int | None
) -> dict[str, Any]:
    """The endpoint's deliveries, newest first, `limit` at a time (`before_seq` pages on)."""
    rows = WebhookDelivery.objects.filter(endpoint=endpoint)
    if before_seq is not None:
        rows = rows.filter(seq__lt=before_seq)
    items = list(rows.order_by("-seq")[: limit + 1])
    more = len(items) > limit
    items = items[:limit]
    return {"items": items, "next_before_seq": items[-1].seq if more else None}


def webhook_status(*, now: datetime | None = None, items: int = 5) -> dict[str, Any]:
    """Backlog, retrying, oldest pending and the failing endpoints (operator, every tenant)."""
    now = now or timezone.now()
    pending = WebhookDelivery.objects.filter(delivered_at__isnull=True)
    counts = pending.aggregate(
        backlog=Count("seq"),
        retrying=Count("seq", filter=Q(attempt_count__gt=0)),
        oldest_pending_at=Min("created_at"),
    )
    oldest = counts["oldest_pending_at"]
    failing = WebhookEndpoint.objects.filter(failing_since__isnull=False, enabled=True)
    disabled = WebhookEndpoint.objects.filter(enabled=False)
    return {
        "endpoints": WebhookEndpoint.objects.count(),
        "backlog": counts["backlog"],
        "retrying": counts["retrying"],
        "oldest_pending_at": oldest,
        "oldest_pending_age_seconds": (now - oldest).total_seconds() if oldest else None,
        "failing_count": failing.count(),
        "disabled_count": disabled.count(),
        "failing": list(
            failing.order_by("failing_since").values("id", "tenant_id", "url", "failing_since")[
                :items
            ]
        ),
    }
