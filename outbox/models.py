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

from django.db import models

from agentrun.model_bases import (
    DeliveryState,
    RelayedDelivery,
    TextIdModel,
    Timestamped,
    partial_index,
)
from runs.models import Run

OUTBOX_SEQUENCE = "agentrun_kafka_event_outbox_seq"


# A record's derived state (pending, leased, retrying, delivered), shared with webhook
# deliveries: the same lease and outcome columns (`RelayedDelivery.state_at`).
OutboxState = DeliveryState


class KafkaEventOutbox(RelayedDelivery, TextIdModel, Timestamped):
    # Unique by construction (one global sequence), so no unique index: a full index on it
    # took an entry per settled row (migration 0004).
    outbox_seq = models.BigIntegerField()
    event_id = models.TextField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="outbox_records")
    source_seq = models.IntegerField(help_text="The event's per-run seq.")
    topic = models.TextField()
    partition_key = models.TextField()
    value = models.JSONField(help_text="The CloudEvents 1.0 structured JSON envelope.")
    headers = models.JSONField(default=dict)
    last_error = models.JSONField(null=True, blank=True)

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
        # table's autovacuum and drops the `LIKE` copies of the id indexes; 0004 its fillfactor.
        indexes = [
            # The status's and the doctor's "first in line": the lowest undelivered seqs. Partial,
            # so settling a record (which sets `delivered_at`) adds no entry to it.
            partial_index(
                "outbox_seq",
                where=models.Q(delivered_at__isnull=True),
                name="agentrun_kobx_pending_seq_idx",
            ),
            # Pruning deletes the oldest delivered rows first.
            partial_index(
                "delivered_at",
                where=models.Q(delivered_at__isnull=False),
                name="agentrun_kobx_delivered_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.partition_key} #{self.outbox_seq})"
