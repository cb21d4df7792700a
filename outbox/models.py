"""The Kafka event outbox (seed `agentrun_kafka_event_outbox`, migrations 012 and 015).

One row per event to export, written in the event's own transaction, so Kafka sees an
event if and only if its transaction committed. `outbox_seq` comes from one global
sequence, taken under a per-(topic, partition key) advisory lock, so within a key it
follows commit order; the relay delivers each key's undelivered rows in `outbox_seq`
order. The relay's claim is the fencing token: (id, lease_owner, attempt_count) with a
live lease. The relay services own every column after the insert, so the admin is
read-only.
"""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models.functions import Now

from agentrun.model_bases import LeasedWork, TextIdModel, Timestamped
from runs.models import Run

OUTBOX_SEQUENCE = "agentrun_kafka_event_outbox_seq"


class OutboxState(models.TextChoices):
    """A derived state (no column holds it): how the admin filters and the status counts."""

    PENDING = "pending"  # never claimed, waiting for the relay
    LEASED = "leased"  # claimed by a relay worker whose lease has not expired
    RETRYING = "retrying"  # attempted before, waiting for its next attempt
    DELIVERED = "delivered"  # acknowledged by Kafka (acks=all)


class KafkaEventOutbox(LeasedWork, TextIdModel, Timestamped):
    outbox_seq = models.BigIntegerField(unique=True)
    event_id = models.TextField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="outbox_records")
    source_seq = models.IntegerField(help_text="The event's per-run seq.")
    topic = models.TextField()
    partition_key = models.TextField()
    value = models.JSONField(help_text="The CloudEvents 1.0 structured JSON envelope.")
    headers = models.JSONField(default=dict)
    # The database's clock, like every lease and due-time comparison of the relay.
    next_attempt_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_kafka_event_outbox"
        verbose_name = "Kafka outbox record"
        constraints = [
            models.UniqueConstraint(
                fields=["topic", "event_id"], name="agentrun_kafka_event_outbox_event_key"
            ),
        ]
        # Seed migration 015's pending key-order index,
        #   agentrun_kafka_event_outbox_pending_key_order_idx
        #   ON (topic, partition_key, outbox_seq) WHERE delivered_at IS NULL,
        # is created by migration 0001 in SQL: Django caps `Index` names at 30 characters
        # and we keep the seed's name. The claim walks each key's undelivered rows in order
        # through it, and the status reads only undelivered rows. Migration 0002 sets the
        # table's fillfactor and autovacuum and drops the `LIKE` copies of the id indexes.
        indexes = [
            # Pruning deletes the oldest delivered rows first.
            models.Index(
                fields=["delivered_at"],
                condition=models.Q(delivered_at__isnull=False),
                name="agentrun_kobx_delivered_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.partition_key} #{self.outbox_seq})"

    def state_at(self, now: datetime) -> OutboxState:
        if self.delivered_at is not None:
            return OutboxState.DELIVERED
        if self.lease_expires_at is not None and self.lease_expires_at > now:
            return OutboxState.LEASED
        return OutboxState.RETRYING if self.attempt_count > 0 else OutboxState.PENDING
