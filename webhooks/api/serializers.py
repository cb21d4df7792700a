"""Serializers of the webhooks API: strict plain serializers in, model serializers out."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from agentrun.api import row_fields
from agentrun.validation import IdField, StrictSerializer
from runs.models import EventType
from webhooks.models import WebhookDelivery, WebhookEndpoint

EVENT_TYPES = frozenset(EventType.values)
MAX_URL = 2_000


class EventTypesField(serializers.ListField):
    """A non-empty list of known event types, or `["*"]`; duplicates dropped, order kept."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(child=serializers.CharField(max_length=100), max_length=50, **kwargs)

    def to_internal_value(self, data: Any) -> list[str]:
        if not isinstance(data, list):
            raise serializers.ValidationError('expected a list of event types or ["*"]')
        types = list(dict.fromkeys(super().to_internal_value(data)))
        if not types:
            raise serializers.ValidationError('name at least one event type, or "*"')
        unknown = [name for name in types if name != "*" and name not in EVENT_TYPES]
        if unknown:
            known = ", ".join(sorted(EVENT_TYPES))
            raise serializers.ValidationError(
                f"unknown event type {unknown[0]!r} (known: {known}, *)"
            )
        return ["*"] if "*" in types else types


class UrlField(serializers.URLField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_length=MAX_URL, **kwargs)


class EndpointCreateIn(StrictSerializer):
    tenant_id = IdField(required=False, help_text="Operator keys only.")
    url = UrlField()
    event_types = EventTypesField()
    description = serializers.CharField(
        max_length=500, required=False, default="", allow_blank=True
    )


class EndpointUpdateIn(StrictSerializer):
    url = UrlField(required=False)
    event_types = EventTypesField(required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError({"non_field_errors": ["nothing to change"]})
        return attrs


class ReplayIn(StrictSerializer):
    after = serializers.JSONField(
        help_text="A delivery `seq` (integer, exclusive) or an ISO-8601 time: what the "
        "endpoint matched after it is sent again, in order."
    )

    def validate_after(self, value: Any) -> Any:
        if isinstance(value, bool):
            raise serializers.ValidationError("expected a delivery seq or an ISO-8601 time")
        if isinstance(value, int):
            if value < 0:
                raise serializers.ValidationError("a seq is at least 0")
            return value
        if isinstance(value, str):
            parsed = serializers.DateTimeField().to_internal_value(value)
            return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed)
        raise serializers.ValidationError("expected a delivery seq or an ISO-8601 time")


class NoQuery(StrictSerializer):
    """A route that takes no query parameters."""


class DeliveryListQuery(StrictSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)
    before_seq = serializers.IntegerField(min_value=1, required=False)


# ---- output --------------------------------------------------------------------------


class EndpointOut(serializers.ModelSerializer[WebhookEndpoint]):
    class Meta:
        model = WebhookEndpoint
        fields = [
            "id",
            "tenant_id",
            "url",
            "event_types",
            "description",
            "enabled",
            "disabled_reason",
            "failing_since",
            "previous_secret_expires_at",
            "created_at",
            "updated_at",
        ]


class EndpointWithSecretOut(EndpointOut):
    secret = serializers.CharField(help_text="`whsec_…`: shown this once.")

    class Meta(EndpointOut.Meta):
        fields = [*EndpointOut.Meta.fields, "secret"]


class DeliveryOut(serializers.ModelSerializer[WebhookDelivery]):
    state = serializers.SerializerMethodField()

    class Meta:
        model = WebhookDelivery
        fields = row_fields(
            WebhookDelivery, hide={"endpoint_id", "lease_owner", "lease_expires_at"}, then=["state"]
        )

    def get_state(self, delivery: WebhookDelivery) -> str:
        return str(delivery.state_at(timezone.now()))


class DeliveryPageOut(serializers.Serializer[Any]):
    items = DeliveryOut(many=True)
    next_before_seq = serializers.IntegerField(allow_null=True)


class ReplayOut(serializers.Serializer[Any]):
    replayed = serializers.IntegerField()
    first_seq = serializers.IntegerField(allow_null=True)
    last_seq = serializers.IntegerField(allow_null=True)
    truncated = serializers.BooleanField(help_text="More matched than one replay sends.")
