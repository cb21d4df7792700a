"""Abstract column groups that several apps' tables share, declared once.

Each base adds exactly the columns its models declared one by one before, so the
migrations see no change (Django lists inherited columns first; column order is not part
of a migration's state). But an output that lists all of a model's fields
(`exclude = []`: `SessionOut`, `TaskOut`) would change its key order, so `Session` and
`QueueTask` keep declaring their own timestamps.

- `TextIdModel`: the seed's text primary key `id`, and a row that reads as its id.
- `Timestamped`: `created_at` / `updated_at`, both set by Python at insert; the services
  move `updated_at` themselves on every write.
- `CancelMarked`: the mark a cancel request leaves on the run or command it targets.
- `ReadMark`: who marked a row read, and when (a reader's cursor row; the concrete model
  adds the row read and the version it was at).
- `Leased`: a row that workers claim under a lease and retry with backoff (dispatch
  intents, outbox records, webhook deliveries): how often it was tried, by whom until
  when. Each declares its own `last_error` (JSON or text, as the seed has it).
  `RelayedDelivery` is a record a relay delivers in key order (Kafka outbox records,
  webhook deliveries): when it is next due, when it was delivered, and the
  `DeliveryState` derived from those columns.
- `SessionReferenced`: the `session_id` of a row's `session_ref` (runs, queue tasks).

And two index helpers, for the two shapes the seed's tables repeat: `partial_index` (the
hot subset a claim or a sweep reads) and `unique_idempotency_key` (the replay fence).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone


def partial_index(*fields: str, where: models.Q, name: str) -> models.Index:
    """An index of only the rows `where` holds: the open, pending or undelivered few that a
    claim or a sweep reads, which stay small while the history grows."""
    return models.Index(fields=list(fields), condition=where, name=name)


def unique_idempotency_key(*scope: str, name: str) -> models.UniqueConstraint:
    """The seed's replay fence: within `scope` an idempotency key names at most one row
    (a replay finds it); rows written without a key are not fenced."""
    return models.UniqueConstraint(
        fields=[*scope, "idempotency_key"],
        condition=models.Q(idempotency_key__isnull=False),
        name=name,
    )


class TextIdModel(models.Model):
    id = models.TextField(primary_key=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.id


class Timestamped(models.Model):
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class CancelMarked(models.Model):
    """A cancel request's mark on the run or command it targets (SPEC §9.7; the names are
    `runs.models.CANCEL_MARK_FIELDS`)."""

    cancel_epoch = models.IntegerField(default=0, db_default=0)
    cancel_request_id = models.TextField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(null=True, blank=True)

    class Meta:
        abstract = True


class ReadMark(models.Model):
    reader_id = models.TextField()
    read_at = models.DateTimeField(default=timezone.now)

    class Meta:
        abstract = True


class Leased(models.Model):
    attempt_count = models.IntegerField(default=0)
    lease_owner = models.TextField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class DeliveryState(models.TextChoices):
    """A derived state (no column holds it): how the admin filters and the status counts."""

    PENDING = "pending"  # never claimed, waiting for the relay
    LEASED = "leased"  # claimed by a relay worker whose lease has not expired
    RETRYING = "retrying"  # attempted before, waiting for its next attempt
    DELIVERED = "delivered"  # acknowledged by the receiver (Kafka: acks=all)


class RelayedDelivery(Leased):
    # The database's clock, like every lease and due-time comparison of the relays.
    next_attempt_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    def state_at(self, now: datetime) -> DeliveryState:
        if self.delivered_at is not None:
            return DeliveryState.DELIVERED
        if self.lease_expires_at is not None and self.lease_expires_at > now:
            return DeliveryState.LEASED
        return DeliveryState.RETRYING if self.attempt_count > 0 else DeliveryState.PENDING


class SessionReferenced:
    """The session a row's `session_ref` names (a plain mixin: the concrete models declare
    the column themselves, where their outputs list it)."""

    session_ref: Any

    @property
    def session_id(self) -> str | None:
        ref = self.session_ref
        value = ref.get("session_id") if isinstance(ref, dict) else None
        return value if isinstance(value, str) and value else None
