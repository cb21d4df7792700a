"""Output serializers of the runs API: what a run, command, event, cancel request, runner
job, runner and backend look like to a client (the input side is `runs.api.serializers`).

`ModelSerializer`s for output, plain serializers for input (HOUSE-STYLE rule 4); a runner
job's host details (pid, argv, paths) are shown to operators only.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentrun import api
from agentrun.pagination import NumberedPageOut
from runs.control_models import CancelRequest
from runs.models import Backend, Command, Event, Run, Runner, RunnerJob

# What a local launch records about the host; shown to operators only (issue 16 finding 3).
HOST_RESULT_KEYS = frozenset({"pid", "process_start", "log_path", "argv"})


class RunOut(serializers.ModelSerializer[Run]):
    class Meta:
        model = Run
        fields = api.row_fields(Run, then=["requires_action"])

    # A person must decide something before the run can go on (SPEC §9.3).
    requires_action = serializers.SerializerMethodField()

    def get_requires_action(self, run: Run) -> bool:
        return run.pending_approvals > 0 and not run.is_terminal


def without_host_details(result: Any) -> Any:
    """A runner job's result as a tenant may see it: no pid, paths or argv of the host."""
    if not isinstance(result, dict):
        return result
    return {key: value for key, value in result.items() if key not in HOST_RESULT_KEYS}


class RunListItemOut(RunOut):
    latest_command = serializers.JSONField(read_only=True, allow_null=True)
    latest_runner_job = serializers.SerializerMethodField()

    class Meta(RunOut.Meta):
        fields = [*RunOut.Meta.fields, "latest_command", "latest_runner_job"]

    @extend_schema_field(serializers.JSONField(allow_null=True))
    def get_latest_runner_job(self, run: Any) -> Any:
        job = getattr(run, "latest_runner_job", None)
        if isinstance(job, dict) and "result" in job:
            return {**job, "result": without_host_details(job["result"])}
        return job


class RunFacetsOut(serializers.Serializer[Any]):
    projects = serializers.ListField(child=serializers.CharField())
    workspaces = serializers.ListField(child=serializers.CharField())
    backends = serializers.ListField(child=serializers.CharField())
    providers = serializers.ListField(child=serializers.CharField())
    status_counts = serializers.DictField(child=serializers.IntegerField())


class RunPageOut(NumberedPageOut):
    items = RunListItemOut(many=True)
    facets = RunFacetsOut()
    total_truncated = serializers.BooleanField(
        help_text="`total` stopped counting at its cap (10,000 runs): narrow the filters."
    )
    facets_truncated = serializers.BooleanField(
        help_text="`facets` describe the 1,000 most recently updated runs, not all of them."
    )


class DispatchIntentRefOut(serializers.Serializer[Any]):
    id = serializers.CharField()
    state = serializers.CharField()
    attempt_count = serializers.IntegerField()
    runner_job_id = serializers.CharField(help_text="The planned id: the saved job's id.")
    next_attempt_at = serializers.DateTimeField()
    # The seed's error and outcome fields (issue 17 item 7); `last_error` is stored redacted.
    last_error = serializers.JSONField(allow_null=True)
    dispatch_outcome = serializers.CharField(allow_null=True)
    actual_runner_job_id = serializers.CharField(allow_null=True)
    active_runner_id = serializers.CharField(allow_null=True)
    dispatched_at = serializers.DateTimeField(allow_null=True)


class CommandOut(serializers.ModelSerializer[Command]):
    run_id = serializers.CharField(read_only=True)
    dispatch_intent = serializers.SerializerMethodField()

    @extend_schema_field(DispatchIntentRefOut(allow_null=True))
    def get_dispatch_intent(self, command: Command) -> dict[str, Any] | None:
        intent = getattr(command, "dispatch_intent", None)
        return None if intent is None else DispatchIntentRefOut(intent).data

    class Meta:
        model = Command
        fields = api.row_fields(Command, then=["dispatch_intent"])


class EventOut(serializers.ModelSerializer[Event]):
    run_id = serializers.CharField(read_only=True)

    class Meta:
        model = Event
        fields = ["id", "run_id", "seq", "type", "payload", "created_at"]


@cache
def _event_out_fields() -> dict[str, Any]:
    """`EventOut`'s fields, built once: a ModelSerializer builds them per instance, and an
    unbound field keeps no state while it represents a value, so threads may share them."""
    return dict(EventOut().fields)


def appended_events_out(events: list[Event]) -> list[dict[str, Any]]:
    """`EventOut` of an append's events (its answer), field by field as `EventOut` renders
    them but each timestamp once: an append's events share theirs. Per event the whole
    serializer cost about as much CPU as the append's own statements (bench cell 2, batch
    100); `tests/api/test_output_fields.py` pins both to the same output."""
    fields = _event_out_fields()
    created_at, seq, payload = fields["created_at"], fields["seq"], fields["payload"]
    times: dict[Any, Any] = {}
    items = []
    for event in events:
        when = event.created_at
        if when not in times:
            times[when] = created_at.to_representation(when)
        items.append(
            {
                "id": event.id,
                "run_id": event.run_id,
                "seq": seq.to_representation(event.seq),
                "type": event.type,
                "payload": payload.to_representation(event.payload),
                "created_at": times[when],
            }
        )
    return items


class EventPageOut(serializers.Serializer[Any]):
    items = EventOut(many=True)
    count = serializers.IntegerField()
    next_after_seq = serializers.IntegerField()
    timed_out = serializers.BooleanField()


class CountOut(serializers.Serializer[Any]):
    count = serializers.IntegerField()


class CancelRequestOut(serializers.ModelSerializer[CancelRequest]):
    run_id = serializers.CharField(read_only=True, allow_null=True)
    command_id = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = CancelRequest
        fields = api.row_fields(CancelRequest)


class CancelReceiptOut(serializers.Serializer[Any]):
    cancel_request = CancelRequestOut(allow_null=True)
    changed = serializers.BooleanField()
    run = RunOut()
    command = CommandOut(allow_null=True, required=False)


class RunnerJobOut(serializers.ModelSerializer[RunnerJob]):
    """`result` without the host's details unless the context says `operator`."""

    run_id = serializers.CharField(read_only=True)
    command_id = serializers.CharField(read_only=True)

    def to_representation(self, instance: RunnerJob) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        if not self.context.get("operator"):
            data["result"] = without_host_details(data.get("result"))
        return data

    class Meta:
        model = RunnerJob
        fields = api.row_fields(RunnerJob)


class RunnerOut(serializers.ModelSerializer[Runner]):
    class Meta:
        model = Runner
        fields = api.row_fields(Runner, hide={"tenant_id"})


class BackendOut(serializers.ModelSerializer[Backend]):
    class Meta:
        model = Backend
        fields = ["profile", "capabilities", "capacity", "health", "updated_at"]
