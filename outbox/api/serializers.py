"""Output of the outbox API: the operator status."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class OutboxErrorRecordSerializer(serializers.Serializer[Any]):
    id = serializers.CharField()
    partition_key = serializers.CharField()
    attempt_count = serializers.IntegerField()


class OutboxStatusSerializer(serializers.Serializer[Any]):
    enabled = serializers.BooleanField()
    topic = serializers.CharField()
    backlog = serializers.IntegerField(help_text="Records not yet delivered.")
    retrying = serializers.IntegerField(help_text="Undelivered records attempted at least once.")
    leased = serializers.IntegerField(help_text="Records a relay worker is delivering now.")
    oldest_pending_at = serializers.DateTimeField(allow_null=True)
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)
    max_attempt_count = serializers.IntegerField()
    first_error = serializers.JSONField(allow_null=True)
    first_error_record = OutboxErrorRecordSerializer(allow_null=True)
