"""Reads of the outbox app: the operator status (seed `kafkaEventOutboxStatus`).

Only undelivered rows are aggregated (the pending key-order index covers them), so the
status stays cheap however many delivered rows retention keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db.models import Count, Max, Min, Q
from django.utils import timezone

from outbox.kafka import outbox_enabled, outbox_topic
from outbox.models import KafkaEventOutbox
from outbox.services.prune import prune_cutoff


def outbox_status(*, now: datetime | None = None) -> dict[str, Any]:
    """Backlog, retrying, in flight, oldest pending, max attempts and the first error.

    `retrying` counts undelivered records attempted at least once (the seed's meaning);
    `first_error` is the error of the undelivered record with the lowest `outbox_seq`.
    """
    now = now or timezone.now()
    pending = KafkaEventOutbox.objects.filter(delivered_at__isnull=True)
    counts = pending.aggregate(
        backlog=Count("id"),
        retrying=Count("id", filter=Q(attempt_count__gt=0)),
        leased=Count("id", filter=Q(lease_expires_at__gt=now)),
        oldest_pending_at=Min("created_at"),
        max_attempt_count=Max("attempt_count"),
    )
    first = (
        pending.filter(last_error__isnull=False)
        .order_by("outbox_seq")
        .values("id", "partition_key", "attempt_count", "last_error")
        .first()
    )
    oldest = counts["oldest_pending_at"]
    return {
        "enabled": outbox_enabled(),
        "topic": outbox_topic(),
        "backlog": counts["backlog"],
        "retrying": counts["retrying"],
        "leased": counts["leased"],
        "oldest_pending_at": oldest,
        "oldest_pending_age_seconds": (now - oldest).total_seconds() if oldest else None,
        "max_attempt_count": counts["max_attempt_count"] or 0,
        "first_error": first["last_error"] if first else None,
        "first_error_record": _error_record(first),
    }


def _error_record(first: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if first is None:
        return None
    return {name: first[name] for name in ("id", "partition_key", "attempt_count")}


def count_prunable(*, retention_days: int | None = None) -> int:
    """How many delivered records are past the retention period (for a dry run)."""
    return KafkaEventOutbox.objects.filter(
        delivered_at__lt=prune_cutoff(retention_days=retention_days)
    ).count()
