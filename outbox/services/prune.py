"""Retention: deleting delivered outbox records older than the retention period.

Undelivered records are never pruned, however old. Each batch is its own short transaction
deleting at most `batch_size` rows, oldest delivered first, so pruning never holds locks
on a large set of rows or builds a long transaction; several pruners at once are harmless
(a row deleted twice counts once).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agentrun import conf
from outbox.models import KafkaEventOutbox


@dataclass(frozen=True)
class PruneResult:
    deleted: int
    batches: int
    more: bool  # stopped at max_batches with rows still to prune

    def as_dict(self) -> dict[str, int | bool]:
        return asdict(self)


def prune_cutoff(*, retention_days: int | None = None) -> datetime:
    if retention_days is None:
        retention_days = conf.outbox_retention_days()
    return timezone.now() - timedelta(days=retention_days)


def prune_delivered_outbox(
    *, cutoff: datetime | None = None, batch_size: int = 1_000, max_batches: int = 100
) -> PruneResult:
    """Delete records delivered before `cutoff` (default: now minus the retention period).

    Locks: the deleted rows, one batch per transaction. Returns how many were deleted.
    """
    cutoff = cutoff or prune_cutoff()
    deleted = 0
    for batch in range(1, max_batches + 1):
        count = _prune_batch(cutoff=cutoff, batch_size=batch_size)
        deleted += count
        if count < batch_size:
            return PruneResult(deleted=deleted, batches=batch, more=False)
    return PruneResult(deleted=deleted, batches=max_batches, more=True)


def _prune_batch(*, cutoff: datetime, batch_size: int) -> int:
    with transaction.atomic(durable=True):
        ids = list(
            KafkaEventOutbox.objects.filter(delivered_at__lt=cutoff)
            .order_by("delivered_at")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return 0
        count, _ = KafkaEventOutbox.objects.filter(pk__in=ids, delivered_at__lt=cutoff).delete()
        return count
