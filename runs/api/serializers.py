"""Serializers of the runs API: strict plain serializers in, model serializers out."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from agentrun import conf
from agentrun.pagination import SeqCursorQuery
from agentrun.validation import (
    INT4_MAX,
    KIB,
    MIB,
    BoundedJSONObjectField,
    IdField,
    ReservedIdField,
    StrictSerializer,
)
from dispatch.intents import dispatch_request_errors
from runs.models import (
    RUNNER_EVENT_TYPE_CHOICES,
    TERMINAL_RUN_STATUSES,
    CommandType,
    FailureKind,
    RunStatus,
)
from runs.phases import SERVER_PHASES
from runs.policy import check_execution_policy
from runs.services.event_log import NewEvent
from runs.services.lifecycle import RunSpec
from runs.services.terminal import TurnResult

EVENT_PAYLOAD_MAX = 1 * MIB
COMMAND_PAYLOAD_MAX = 256 * KIB
REF_MAX = 64 * KIB
MAX_EVENTS_PER_BATCH = 500
# In the enum's order, so the OpenAPI document lists them as before.
TERMINAL_STATUS_CHOICES = [status.value for status in RunStatus if status in TERMINAL_RUN_STATUSES]


# ---- input ---------------------------------------------------------------------------


WORKSPACE_PATH_MAX = 4096


class WorkspaceRefField(BoundedJSONObjectField):
    """A workspace reference: any JSON object of at most 64 KiB, as the seed stores it,
    with a non-empty string `path` of at most 4,096 characters (what the run list filters
    on and the Codex backend works in). Other keys are kept as given."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_bytes=REF_MAX, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if value is None:
            return value
        path = value.get("path")
        if not isinstance(path, str) or not path:
            raise serializers.ValidationError({"path": ["a non-empty string is required"]})
        if len(path) > WORKSPACE_PATH_MAX:
            raise serializers.ValidationError(
                {"path": [f"at most {WORKSPACE_PATH_MAX} characters"]}
            )
        return value


# drf-spectacular's extension base classes register themselves in an untyped hook.
class WorkspaceRefFieldSchema(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """The OpenAPI shape of `WorkspaceRefField`: an object that must carry `path`."""

    target_class = WorkspaceRefField
    priority = 1  # over agentrun.schema's JSON object extension, which matches subclasses

    def map_serializer_field(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        path = {"type": "string", "minLength": 1, "maxLength": WORKSPACE_PATH_MAX}
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"path": path},
            "required": ["path"],
            "additionalProperties": {},
        }
        if self.target.allow_null:
            schema["nullable"] = True
        return schema


class SessionRefIn(StrictSerializer):
    """No `thread_id`: the server records the thread from the backend's reports, so a
    client cannot point its session at another tenant's thread (issue 16 finding 4)."""

    session_id = ReservedIdField()
    conversation_id = IdField(required=False, allow_null=True)
    metadata = BoundedJSONObjectField(max_bytes=REF_MAX, required=False)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if value.get("expires_at") is not None:
            value["expires_at"] = value["expires_at"].isoformat()
        return value


class RunCreateIn(StrictSerializer):
    id = ReservedIdField(required=False)
    tenant_id = IdField(required=False, help_text="Operator keys only; clients use their own.")
    project_id = IdField()
    workspace_ref = WorkspaceRefField()
    provider_id = IdField()
    backend_profile = IdField()
    execution_policy = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)
    session_ref = SessionRefIn(required=False, allow_null=True)
    resource_bundle_ref = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, allow_null=True)
    trace_sink = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        check_execution_policy(
            attrs.get("execution_policy"), backend_profile=attrs["backend_profile"]
        )
        return attrs

    def spec(self) -> RunSpec:
        data = self.validated_data
        session_ref = dict(data["session_ref"]) if data.get("session_ref") else None
        return RunSpec.from_request(data, session_ref=session_ref)


class CancelIn(StrictSerializer):
    reason = serializers.CharField(max_length=2000, required=False, default="cancel requested")


class DispatchField(BoundedJSONObjectField):
    """A client's `dispatch` request (optional, null for none): it names at most a launch
    profile; a 400 names any other key."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(max_bytes=REF_MAX, required=False, allow_null=True, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        errors = dispatch_request_errors(value) if value is not None else {}
        if errors:
            raise serializers.ValidationError(errors)
        return value


class CommandCreateIn(StrictSerializer):
    type = serializers.ChoiceField(choices=CommandType.choices)
    payload = BoundedJSONObjectField(max_bytes=COMMAND_PAYLOAD_MAX, required=False, default=dict)
    idempotency_key = IdField(required=False, allow_null=True)
    dispatch = DispatchField(
        default=None,
        help_text="Launch a runner for this command: {} for the default launch profile, or "
        '{"launch_profile": NAME} for one the operator defined. Omit or null for none.',
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        text = attrs.get("payload", {}).get("text")
        if attrs["type"] in ("turn", "steer") and (not isinstance(text, str) or not text):
            raise serializers.ValidationError(
                {"payload": [f"payload.text must be a non-empty string for a {attrs['type']}"]}
            )
        return attrs


class RunnerWriteIn(StrictSerializer):
    """The fencing token every runner write carries (SPEC §8)."""

    runner_id = IdField()
    lease_epoch = serializers.IntegerField(min_value=0, max_value=INT4_MAX)

    def fence(self) -> dict[str, Any]:
        """The token alone (`runner_id`, `lease_epoch`), for a write whose other fields the
        service takes in another form."""
        data = self.validated_data
        return {"runner_id": data["runner_id"], "lease_epoch": data["lease_epoch"]}


def _lease_ms_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1000,
        max_value=conf.max_lease_ms(),
        default=conf.default_lease_ms(),
    )


class ClaimIn(StrictSerializer):
    runner_id = IdField()
    lease_ms = _lease_ms_field()


class HeartbeatIn(RunnerWriteIn):
    lease_ms = _lease_ms_field()


class FinishIn(RunnerWriteIn):
    terminal_status = serializers.ChoiceField(choices=TERMINAL_STATUS_CHOICES)
    failure_kind = serializers.ChoiceField(
        choices=FailureKind.choices, required=False, allow_null=True
    )
    failure_message = serializers.CharField(
        max_length=16 * KIB, required=False, allow_null=True, allow_blank=True
    )
    thread_id = IdField(required=False, allow_null=True)
    turn_id = IdField(required=False, allow_null=True)

    def result(self) -> TurnResult:
        data = self.validated_data
        return TurnResult(
            terminal_status=data["terminal_status"],
            failure_kind=data.get("failure_kind"),
            failure_message=data.get("failure_message"),
            thread_id=data.get("thread_id"),
            turn_id=data.get("turn_id"),
        )


def _event_type_field(*, required: bool = True) -> serializers.ChoiceField:
    return serializers.ChoiceField(
        choices=RUNNER_EVENT_TYPE_CHOICES,
        required=required,
        error_messages={"invalid_choice": '"{input}" is not an event type a runner may append.'},
    )


class EventIn(StrictSerializer):
    type = _event_type_field()
    payload = BoundedJSONObjectField(max_bytes=EVENT_PAYLOAD_MAX, required=False, default=dict)


def _refuse_server_phase(item: dict[str, Any], *, field: str) -> None:
    """A runner's `backend_status` may not claim a phase only the server writes (a forged
    `command-terminal` would read as the server's word in the run's history)."""
    phase = (item.get("payload") or {}).get("phase")
    if item.get("type") == "backend_status" and phase in SERVER_PHASES:
        raise serializers.ValidationError(
            {field: [f"phase {phase!r} is written by the server, not by a runner"]}
        )


# The `token_usage` fields the usage sums read: each a non-negative integer when given.
USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
)


def _check_usage(item: dict[str, Any], *, field: str) -> None:
    """A `token_usage` payload must hold integers the usage sums can add (SPEC §9.4)."""
    if item.get("type") != "token_usage":
        return
    payload = item.get("payload") or {}
    for key in USAGE_KEYS:
        value = payload.get(key)
        bad = not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**53
        if key in payload and bad:
            raise serializers.ValidationError({field: [f"{key} must be a non-negative integer"]})
    if "model" in payload and not isinstance(payload["model"], str | None):
        raise serializers.ValidationError({field: ["model must be a string"]})


class EventAppendIn(RunnerWriteIn):
    """One event (`type`, `payload`) or a batch (`events`), appended atomically."""

    plain_fast_path = True  # the runner's append: one event, or a batch in `events`

    type = _event_type_field(required=False)
    payload = BoundedJSONObjectField(max_bytes=EVENT_PAYLOAD_MAX, required=False)
    events = EventIn(  # type: ignore[call-arg]  # ListSerializer takes the length bounds
        many=True, required=False, max_length=MAX_EVENTS_PER_BATCH, min_length=1
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        single = "type" in attrs
        if single == ("events" in attrs):
            raise serializers.ValidationError(
                {"events": ["give either one event (type, payload) or a list in events"]}
            )
        if not single and "payload" in attrs:
            raise serializers.ValidationError({"payload": ["payload goes inside each event"]})
        items = [attrs] if single else attrs["events"]
        for index, item in enumerate(items):
            where = "payload" if single else f"events.{index}.payload"
            _refuse_server_phase(item, field=where)
            _check_usage(item, field=where)
        return attrs

    def new_events(self) -> list[NewEvent]:
        data = self.validated_data
        if "events" in data:
            return [NewEvent(item["type"], item.get("payload") or {}) for item in data["events"]]
        return [NewEvent(data["type"], data.get("payload") or {})]


class EventsQuery(SeqCursorQuery):
    wait = serializers.FloatField(min_value=0, max_value=conf.long_poll_max_seconds(), default=0)


class CountQuery(StrictSerializer):
    after_seq = serializers.IntegerField(min_value=0, max_value=INT4_MAX, default=0)


class CommandEventsQuery(StrictSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=2000, default=500)


class RunnerJobsQuery(StrictSerializer):
    command_id = IdField(required=False)
    idempotency_key = IdField(
        required=False,
        help_text="Only the job saved under this key (seed "
        "`getRunnerJobByIdempotencyKey`): one item or none.",
    )
    payload_hash = serializers.CharField(
        max_length=200,
        required=False,
        help_text="With `idempotency_key`: a 409 if the saved job has another payload hash.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "payload_hash" in attrs and "idempotency_key" not in attrs:
            raise serializers.ValidationError({"payload_hash": ["only with idempotency_key"]})
        return attrs


class RunnerJobIn(StrictSerializer):
    id = ReservedIdField(required=False, help_text="The job's id (default: a new `rjob_…`).")
    payload_hash = serializers.CharField(
        max_length=200,
        required=False,
        help_text="The caller's hash of the job, compared on an idempotent replay (default: "
        "the hash of the job's fields).",
    )
    command_id = IdField()
    idempotency_key = IdField(required=False, allow_null=True)
    attempt_id = IdField()
    runner_id = IdField()
    namespace = serializers.CharField(max_length=253)
    job_name = serializers.CharField(max_length=253)
    manager_url = serializers.CharField(max_length=2048)
    image = serializers.CharField(max_length=1024)
    source_commit = serializers.CharField(max_length=200)
    service_account_name = serializers.CharField(max_length=253, required=False, allow_null=True)
    result = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)


class RunnerJobPatchIn(StrictSerializer):
    result = BoundedJSONObjectField(max_bytes=REF_MAX)


class RunnerRegisterIn(StrictSerializer):
    id = IdField(required=False)
    run_id = IdField(required=False, allow_null=True)
    attempt_id = IdField(required=False, allow_null=True)
    backend_profile = IdField(required=False, allow_null=True)
    placement = serializers.CharField(max_length=200, required=False, allow_null=True)
    source_commit = serializers.CharField(max_length=200, required=False, allow_null=True)
    metadata = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)


# ---- output --------------------------------------------------------------------------
