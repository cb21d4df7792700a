"""Output of the dispatch API."""

from __future__ import annotations

from rest_framework import serializers

from agentrun.api import CountsOut
from dispatch.models import IntentState


class DispatchStatusOut(CountsOut):
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
    # One `<state>_count` per intent state, as the selector counts them.
    counted = tuple(f"{state}_count" for state in IntentState.values)
