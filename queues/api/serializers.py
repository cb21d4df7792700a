"""Serializers of the work-queue API: strict plain serializers in, model serializers out."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentrun.api import UnreadOut, row_fields
from agentrun.pagination import MAX_PAGE_SIZE, NumberedPageOut
from agentrun.validation import BoundedJSONObjectField, IdField, StrictSerializer
from queues.models import (
    AttemptState,
    QueueAttempt,
    QueueReadCursor,
    QueueTask,
    TaskState,
)
from queues.services.attempt_projection import AttemptReport
from queues.services.tasks import TaskSpec
from runs.api.serializers import (
    COMMAND_PAYLOAD_MAX,
    REF_MAX,
    DispatchField,
    SessionRefIn,
    WorkspaceRefField,
)
from runs.models import FailureKind
from runs.policy import check_execution_policy

# The seed's `priority integer`: any int4, negative ones below the default 0.
MAX_PRIORITY = 2**31 - 1
MIN_PRIORITY = -(2**31)
MAX_REFERENCES = 100
MAX_VERSION = 2**63 - 1

# ---- input ---------------------------------------------------------------------------


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: `5` is, `5.0`, `"5"` and `true` are not (DRF accepts all three)."""

    default_error_messages = {"invalid": "must be a JSON integer"}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class TaskCreateIn(StrictSerializer):
    tenant_id = IdField(required=False, help_text="Operator keys only.")
    project_id = IdField()
    queue = IdField(default="default")
    lane = IdField(default="default")
    title = serializers.CharField(max_length=500)
    priority = StrictIntegerField(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY, default=0)
    backend_profile = IdField()
    # Optional as in the seed's schema: a run started from a task without a provider gets
    # the backend profile's default provider (`runs.selectors.default_provider_id`).
    provider_id = IdField(required=False, allow_null=True, default=None)
    workspace_ref = WorkspaceRefField(required=False, allow_null=True, default=None)
    session_ref = SessionRefIn(required=False, allow_null=True)
    execution_policy = BoundedJSONObjectField(
        max_bytes=REF_MAX, required=False, allow_null=True, default=dict
    )
    resource_bundle_ref = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, allow_null=True)
    payload = BoundedJSONObjectField(max_bytes=COMMAND_PAYLOAD_MAX)
    references = serializers.ListField(
        child=BoundedJSONObjectField(max_bytes=REF_MAX),
        max_length=MAX_REFERENCES,
        required=False,
        default=list,
    )
    metadata = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)
    idempotency_key = IdField(required=False, allow_null=True)
    # Queue tasks dispatch a runner by default; `"dispatch": null` asks for none.
    dispatch = DispatchField(default=dict)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        check_execution_policy(
            attrs.get("execution_policy"), backend_profile=attrs["backend_profile"]
        )
        return attrs

    def spec(self) -> TaskSpec:
        data = {k: v for k, v in self.validated_data.items() if k != "tenant_id"}
        if data.get("workspace_ref") is not None:
            data["workspace_ref"] = dict(data["workspace_ref"])
        if data.get("session_ref") is not None:
            data["session_ref"] = dict(data["session_ref"])
        return TaskSpec(**data)


class TaskListQuery(StrictSerializer):
    queue = IdField(required=False)
    state = serializers.ChoiceField(choices=TaskState.values, required=False)
    lane = IdField(required=False)
    reader_id = IdField(required=False)
    page = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    page_size = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, required=False)
    changed_after = serializers.IntegerField(
        min_value=0,
        max_value=MAX_VERSION,
        required=False,
        error_messages={"invalid": "a change-feed cursor is a task version number"},
    )
    limit = serializers.IntegerField(min_value=1, max_value=500, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        feed = "changed_after" in attrs
        for name in ("page", "page_size") if feed else ("limit",):
            if name in attrs:
                other = "changed_after" if feed else "page"
                raise serializers.ValidationError(
                    {
                        name: [
                            f"not with {other}: the change feed pages by version, the "
                            "backlog by page number"
                        ]
                    }
                )
        return attrs


class TaskQuery(StrictSerializer):
    reader_id = IdField(required=False)


class AttemptsQuery(StrictSerializer):
    """Newest first, paged by `cursor` (the seed's), or oldest first by `after_retry_index`."""

    cursor = serializers.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        required=False,
        help_text="Newest first: attempts with a retry index below this (the previous "
        "page's `cursor`).",
    )
    after_retry_index = serializers.IntegerField(
        min_value=-1,
        max_value=2**31 - 1,
        required=False,
        help_text="Oldest first instead: attempts with a retry index above this.",
    )
    limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE_SIZE, default=100)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "cursor" in attrs and "after_retry_index" in attrs:
            raise serializers.ValidationError(
                {"after_retry_index": ["not with cursor: pick one order"]}
            )
        return attrs


class QueueQuery(StrictSerializer):
    queue = IdField(required=False)


class CommanderQuery(StrictSerializer):
    queue = IdField(required=False)
    reader_id = IdField(required=False)


class TaskCancelIn(StrictSerializer):
    reason = serializers.CharField(max_length=2000, required=False, default="cancel requested")


class TaskReadIn(StrictSerializer):
    reader_id = IdField()


class RetryIn(StrictSerializer):
    idempotency_key = IdField()
    reason = serializers.CharField(max_length=2000)
    dry_run = serializers.BooleanField(required=False, default=False)


class ActivateIn(StrictSerializer):
    """No fields: the reserved attempt already names its run."""


class AttemptFailureIn(StrictSerializer):
    failure_kind = serializers.ChoiceField(choices=FailureKind.values)
    failure_message = serializers.CharField(max_length=4000)


class AttemptReportIn(StrictSerializer):
    attempt_id = IdField()
    state = serializers.ChoiceField(choices=AttemptState.values)
    run_id = IdField(required=False, allow_null=True)
    command_id = IdField(required=False, allow_null=True)
    runner_job_id = IdField(required=False, allow_null=True)
    session_id = IdField(required=False, allow_null=True)
    session_path = serializers.CharField(max_length=4096, required=False, allow_null=True)
    failure_kind = serializers.ChoiceField(
        choices=FailureKind.choices, required=False, allow_null=True
    )
    failure_message = serializers.CharField(max_length=4000, required=False, allow_null=True)


class TaskAttemptIn(StrictSerializer):
    """The seed's `updateQueueTaskAttempt` input: the task's state, its latest attempt."""

    state = serializers.ChoiceField(choices=TaskState.values)
    latest_attempt = AttemptReportIn()
    session_path = serializers.CharField(max_length=4096, required=False, allow_null=True)

    def report(self) -> AttemptReport:
        attempt = dict(self.validated_data["latest_attempt"])
        return AttemptReport(attempt.pop("attempt_id"), attempt.pop("state"), attempt)


# ---- output --------------------------------------------------------------------------


class TaskOut(UnreadOut, serializers.ModelSerializer[QueueTask]):
    class Meta:
        model = QueueTask
        exclude: list[str] = []


class TaskPageOut(NumberedPageOut):
    items = TaskOut(many=True)


class TaskFeedOut(serializers.Serializer[Any]):
    items = TaskOut(many=True)
    next_changed_after = serializers.IntegerField()


class AttemptOut(serializers.ModelSerializer[QueueAttempt]):
    task_id = serializers.CharField()

    class Meta:
        model = QueueAttempt
        fields = row_fields(QueueAttempt)


class AttemptPageOut(serializers.Serializer[Any]):
    task_id = serializers.CharField()
    items = AttemptOut(many=True)
    count = serializers.IntegerField()
    cursor = serializers.CharField(
        allow_null=True,
        help_text="The last item's retry index when the page is full (pass it as `cursor`, "
        "or as `after_retry_index` in that order), else null: the seed's cursor.",
    )


class TaskCancelOut(serializers.Serializer[Any]):
    changed = serializers.BooleanField()
    task = TaskOut()


class TaskReadCursorOut(serializers.ModelSerializer[QueueReadCursor]):
    task_id = serializers.CharField()

    class Meta:
        model = QueueReadCursor
        fields = ["task_id", "reader_id", "task_version", "read_at"]


class ReservationOut(serializers.Serializer[Any]):
    task = TaskOut()
    attempt = AttemptOut(allow_null=True)
    retry_index = serializers.IntegerField()
    created = serializers.BooleanField()
    replayed = serializers.BooleanField()
    dry_run = serializers.BooleanField()


class ActivationOut(serializers.Serializer[Any]):
    task = TaskOut()
    attempt = AttemptOut()
    activated = serializers.BooleanField()


class QueueStatsOut(serializers.Serializer[Any]):
    queue = serializers.CharField(allow_null=True)
    total = serializers.IntegerField()
    by_state = serializers.DictField(child=serializers.IntegerField())
    by_lane = serializers.DictField(child=serializers.DictField(child=serializers.IntegerField()))
    oldest_pending_at = serializers.DateTimeField(allow_null=True)
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)
    generated_at = serializers.DateTimeField()


class CommanderOut(serializers.Serializer[Any]):
    queue = serializers.CharField(allow_null=True)
    reader_id = serializers.CharField(allow_null=True)
    stats = QueueStatsOut()
    items = TaskOut(many=True)
    generated_at = serializers.DateTimeField()
