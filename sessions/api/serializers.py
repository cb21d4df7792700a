"""Serializers of the sessions API: strict plain serializers in, model serializers out."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agentrun.api import UnreadOut
from agentrun.validation import (
    INT4_MAX,
    INT8_MAX,
    BoundedJSONObjectField,
    IdField,
    ReservedIdField,
    StrictSerializer,
)
from runs.api.outputs import CancelRequestOut, CommandOut, EventOut, RunOut
from runs.api.serializers import COMMAND_PAYLOAD_MAX, REF_MAX, DispatchField, WorkspaceRefField
from runs.control_models import Approval, ApprovalState
from runs.policy import budget_error, check_execution_policy
from runs.services.lifecycle import RunSpec
from sessions.models import Session, SessionReadCursor, StorageKind
from sessions.selectors import SESSION_STATE_ALIASES, SESSION_STATES
from sessions.services.lifecycle import SessionFields, StorageFacts
from sessions.turns import WHEN_BUSY

# ---- input ---------------------------------------------------------------------------


class TurnRunIn(StrictSerializer):
    """A run spec without tenant (the key's) or session id (the URL's)."""

    id = ReservedIdField(required=False)
    project_id = IdField()
    workspace_ref = WorkspaceRefField()
    provider_id = IdField()
    backend_profile = IdField()
    execution_policy = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)
    resource_bundle_ref = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, allow_null=True)
    trace_sink = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, allow_null=True)
    conversation_id = IdField(required=False, allow_null=True)
    metadata = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        check_execution_policy(
            attrs.get("execution_policy"), backend_profile=attrs["backend_profile"]
        )
        return attrs


class TurnCommandIn(StrictSerializer):
    payload = BoundedJSONObjectField(max_bytes=COMMAND_PAYLOAD_MAX)
    idempotency_key = IdField(required=False, allow_null=True)
    # Session turns dispatch a runner by default; `"dispatch": null` asks for none.
    dispatch = DispatchField(default=dict)

    def validate_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(payload.get("text"), str) or not payload["text"]:
            raise serializers.ValidationError("payload.text must be a non-empty string")
        return payload


class TurnIn(StrictSerializer):
    tenant_id = IdField(required=False, help_text="Operator keys only.")
    run = TurnRunIn()
    command = TurnCommandIn()
    when_busy = serializers.ChoiceField(choices=WHEN_BUSY, default="reject")
    expected_turn_id = IdField(required=False, allow_null=True)

    def spec(self, session_id: str) -> RunSpec:
        run = self.validated_data["run"]
        expires_at = run.get("expires_at")
        session_ref = {
            "session_id": session_id,
            "conversation_id": run.get("conversation_id"),
            "metadata": run.get("metadata") or {},
            "expires_at": expires_at.isoformat() if expires_at else None,
        }
        return RunSpec.from_request(run, session_ref=session_ref)


class SteerIn(StrictSerializer):
    payload = BoundedJSONObjectField(max_bytes=COMMAND_PAYLOAD_MAX)
    idempotency_key = IdField(required=False, allow_null=True)
    expected_turn_id = IdField(required=False, allow_null=True)

    validate_payload = TurnCommandIn.validate_payload


class SessionCancelIn(StrictSerializer):
    reason = serializers.CharField(max_length=2000, required=False, default="cancel requested")


class SessionUpsertIn(StrictSerializer):
    """No `thread_id`: it is recorded by the server from the backend's reports, never taken
    from a client (another tenant's thread id would resume that tenant's conversation)."""

    tenant_id = IdField(required=False, help_text="Operator keys only.")
    project_id = IdField()
    backend_profile = IdField()
    conversation_id = IdField(required=False, allow_null=True)
    metadata = BoundedJSONObjectField(max_bytes=REF_MAX, required=False, default=dict)
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    codex_rollout_subdir = serializers.CharField(max_length=200, required=False, default="sessions")

    def validate_metadata(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """`metadata.budget` is the session's default budget for its turns (SPEC §9.4)."""
        if "budget" in metadata and (problem := budget_error(metadata["budget"])):
            raise serializers.ValidationError({"budget": [problem]})
        return metadata

    def fields_value(self) -> SessionFields:
        data = {k: v for k, v in self.validated_data.items() if k != "tenant_id"}
        return SessionFields(**data)


class SessionListQuery(StrictSerializer):
    state = serializers.ChoiceField(
        choices=[*SESSION_STATES, *SESSION_STATE_ALIASES],
        default="all",
        help_text="`default` (the seed's) is `all`.",
    )
    backend_profile = IdField(required=False)
    reader_id = IdField(required=False)
    cursor = serializers.IntegerField(
        min_value=0, required=False, error_messages={"invalid": "a cursor is a version number"}
    )
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["state"] == "unread" and not attrs.get("reader_id"):
            raise serializers.ValidationError({"reader_id": ["required for state=unread"]})
        return attrs


class ReaderQuery(StrictSerializer):
    reader_id = IdField(required=False)


class SessionEventsQuery(StrictSerializer):
    run_id = IdField(required=False)
    after_seq = serializers.IntegerField(min_value=0, max_value=INT4_MAX, default=0)
    limit = serializers.IntegerField(min_value=1, max_value=500, default=100)


class ReadIn(StrictSerializer):
    reader_id = IdField()


class StorageIn(StrictSerializer):
    storage_kind = serializers.ChoiceField(
        choices=[StorageKind.NONE, StorageKind.LOCAL, StorageKind.PVC]
    )
    storage_path = serializers.CharField(max_length=4096, required=False, allow_null=True)
    storage_pvc_name = serializers.CharField(max_length=253, required=False, allow_null=True)
    storage_namespace = serializers.CharField(max_length=253, required=False, allow_null=True)
    storage_pvc_phase = serializers.CharField(max_length=64, required=False, allow_null=True)
    storage_size_bytes = serializers.IntegerField(
        min_value=0, max_value=INT8_MAX, required=False, allow_null=True
    )
    storage_files_count = serializers.IntegerField(
        min_value=0, max_value=INT4_MAX, required=False, allow_null=True
    )
    storage_sha256 = serializers.RegexField(r"^[0-9a-f]{64}$", required=False, allow_null=True)
    codex_rollout_subdir = serializers.CharField(max_length=200, required=False, allow_null=True)

    def facts(self) -> StorageFacts:
        return StorageFacts(**self.validated_data)


# ---- output --------------------------------------------------------------------------


class SessionOut(UnreadOut, serializers.ModelSerializer[Session]):
    # Approvals of the session's runs waiting for a person (SPEC §9.3).
    pending_approvals = serializers.SerializerMethodField()
    requires_action = serializers.SerializerMethodField()

    class Meta:
        model = Session
        exclude: list[str] = []

    def get_pending_approvals(self, session: Session) -> int:
        found = getattr(session, "pending_approvals", None)
        if found is None:  # a row written and returned by a service, not a selector's
            found = Approval.objects.filter(
                session_id=session.session_id, state=ApprovalState.PENDING
            ).count()
        return int(found)

    def get_requires_action(self, session: Session) -> bool:
        return self.get_pending_approvals(session) > 0


class SessionListFiltersOut(serializers.Serializer[Any]):
    state = serializers.CharField()
    backend_profile = serializers.CharField(allow_null=True)
    reader_id = serializers.CharField(allow_null=True)
    cursor = serializers.IntegerField(allow_null=True)
    limit = serializers.IntegerField()


class SessionPageOut(serializers.Serializer[Any]):
    items = SessionOut(many=True)
    next_cursor = serializers.IntegerField(allow_null=True)
    # The seed's fields, alongside ours (issue 17 item 9).
    count = serializers.IntegerField()
    cursor = serializers.CharField(
        allow_null=True, help_text="The seed's: the last item's version as text, or null."
    )
    filters = SessionListFiltersOut(help_text="The filters this page applied.")


class AdmissionOut(serializers.Serializer[Any]):
    disposition = serializers.CharField()
    run = RunOut(allow_null=True)  # null when the turn was queued
    command = CommandOut(allow_null=True)
    cancel_request = CancelRequestOut(allow_null=True)
    task_id = serializers.CharField(allow_null=True)  # a queued turn's work-queue task
    position = serializers.IntegerField(allow_null=True)  # 1 = admitted next


class SessionCancelOut(serializers.Serializer[Any]):
    changed = serializers.BooleanField()
    cancel_request = CancelRequestOut(allow_null=True)
    run = RunOut(allow_null=True)


class SessionEventPageOut(serializers.Serializer[Any]):
    session_id = serializers.CharField()
    run_id = serializers.CharField(allow_null=True)
    items = EventOut(many=True)
    count = serializers.IntegerField()
    next_after_seq = serializers.IntegerField()
    cursor = serializers.CharField(
        allow_null=True, help_text="The seed's: the last item's seq as text, or null."
    )


class ResourceRunOut(serializers.Serializer[Any]):
    run = RunOut(allow_null=True)


class ReadCursorOut(serializers.ModelSerializer[SessionReadCursor]):
    session_id = serializers.CharField()

    class Meta:
        model = SessionReadCursor
        fields = ["session_id", "reader_id", "session_version", "read_at"]
