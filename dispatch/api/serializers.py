"""Output of the dispatch API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class DispatchStatusOut(serializers.Serializer[Any]):
    """Backlog of runner dispatch intents (seed `runnerDispatchStatus`, and more)."""

    queue = serializers.CharField()
    total_count = serializers.IntegerField()
    backlog_count = serializers.IntegerField(help_text="pending, retry and dispatching")
    retrying_count = serializers.IntegerField()
    due_count = serializers.IntegerField(help_text="pending or retry and due now")
    expired_lease_count = serializers.IntegerField(
        help_text="dispatching with an expired lease: a worker died mid-launch"
    )
    oldest_pending_at = serializers.DateTimeField(allow_null=True)
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)
    max_attempt_count = serializers.IntegerField()
    pending_count = serializers.IntegerField()
    dispatching_count = serializers.IntegerField()
    retry_count = serializers.IntegerField()
    dispatched_count = serializers.IntegerField()
    failed_count = serializers.IntegerField()
    cancelled_count = serializers.IntegerField()
