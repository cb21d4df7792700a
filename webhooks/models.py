"""Webhook endpoints (per tenant) and their deliveries, one row per (endpoint, event).

A delivery is written in the event's own transaction (`webhooks.record`), so an endpoint
gets an event if and only if its transaction committed, like the Kafka outbox. Its `seq`
comes from the table's identity sequence, drawn after the append holds its session row (or,
for a run without a session, its run row) locked to commit: within one ordering key
(endpoint, `partition_key`) `seq` order is commit order, and the relay sends each key's
deliveries in `seq` order, a later one only after the earlier one was delivered. The relay
owns the lease and outcome columns after the insert.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from agentrun.model_bases import (
    RelayedDelivery,
    TextIdModel,
    Timestamped,
    partial_index,
)
from runs.models import Event, Run


class WebhookEndpoint(TextIdModel, Timestamped):
    tenant_id = models.TextField()
    url = models.TextField()
    # Event types (`agent_message`, …) or `["*"]` for every type.
    event_types = models.JSONField(default=list)
    description = models.TextField(blank=True, default="")
    # HMAC keys must be readable to sign, so the secret is stored as issued (`whsec_…`);
    # it is shown to the caller once, at creation or rotation, and never again.
    secret = models.TextField()
    previous_secret = models.TextField(null=True, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True, default="")
    # When the current run of failed attempts began (NULL after a success).
    failing_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_webhook_endpoints"
        verbose_name = "webhook endpoint"
        indexes = [
            # The append's match reads only a tenant's enabled endpoints.
            partial_index(
                "tenant_id", where=models.Q(enabled=True), name="agentrun_whep_tenant_on_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.url})"

    def matches(self, event_type: str) -> bool:
        return "*" in self.event_types or event_type in self.event_types


class WebhookDelivery(RelayedDelivery):
    seq = models.BigAutoField(primary_key=True)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    event_type = models.TextField()
    partition_key = models.TextField(help_text="`<tenant>:<session or run id>`: the order key.")
    last_status_code = models.IntegerField(null=True, blank=True)
    last_response = models.TextField(blank=True, default="", help_text="Truncated body.")
    last_error = models.TextField(blank=True, default="")
    replay_of = models.BigIntegerField(null=True, blank=True, help_text="A replay's original.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "agentrun_webhook_deliveries"
        verbose_name = "webhook delivery"
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # The relay's claim walks each key's undelivered deliveries in order.
            partial_index(
                "endpoint",
                "partition_key",
                "seq",
                where=models.Q(delivered_at__isnull=True),
                name="agentrun_whd_pending_key_idx",
            ),
            # An endpoint's delivery list and replay, newest first or from a cursor.
            models.Index(fields=["endpoint", "seq"], name="agentrun_whd_endpoint_seq_idx"),
        ]

    def __str__(self) -> str:
        return f"delivery {self.seq} ({self.endpoint_id} {self.partition_key})"
