"""Each output's keys, pinned: outputs that show their row whole take the model's columns
(`agentrun.api.row_fields`), so a column added to a model shows up in its output unless
it is hidden. This test makes that a decision: a new key fails here until it is added on
purpose (and a secret or another tenant's id never is)."""

from __future__ import annotations

import importlib

import pytest

PINNED: dict[str, set[str]] = {
    "runs.api.outputs.RunOut": {
        "backend_profile",
        "cancel_epoch",
        "cancel_reason",
        "cancel_request_id",
        "cancel_requested_at",
        "claimed_by",
        "created_at",
        "execution_policy",
        "failure_kind",
        "failure_message",
        "id",
        "lease_epoch",
        "lease_expires_at",
        "pending_approvals",
        "project_id",
        "provider_id",
        "requires_action",
        "resource_bundle_ref",
        "session_ref",
        "status",
        "tenant_id",
        "terminal_status",
        "trace_sink",
        "updated_at",
        "workspace_ref",
    },
    "runs.api.outputs.CommandOut": {
        "acknowledged_at",
        "cancel_epoch",
        "cancel_reason",
        "cancel_request_id",
        "cancel_requested_at",
        "created_at",
        "dispatch_intent",
        "id",
        "idempotency_key",
        "payload",
        "payload_hash",
        "run_id",
        "seq",
        "state",
        "type",
        "updated_at",
    },
    "runs.api.outputs.RunnerJobOut": {
        "attempt_id",
        "command_id",
        "created_at",
        "id",
        "idempotency_key",
        "image",
        "job_name",
        "manager_url",
        "namespace",
        "payload_hash",
        "result",
        "run_id",
        "runner_id",
        "service_account_name",
        "source_commit",
        "updated_at",
    },
    "runs.api.outputs.CancelRequestOut": {
        "command_id",
        "created_at",
        "epoch",
        "id",
        "metadata",
        "reason",
        "requested_by",
        "run_id",
        "session_id",
        "stage",
        "target_id",
        "target_kind",
        "task_id",
        "updated_at",
    },
    "runs.api.outputs.RunnerOut": {
        "attempt_id",
        "backend_profile",
        "heartbeat_at",
        "id",
        "metadata",
        "placement",
        "registered_at",
        "run_id",
        "source_commit",
    },
    "runs.api.approvals.ApprovalOut": {
        "command_id",
        "created_at",
        "decided_at",
        "decided_by",
        "details",
        "expires_at",
        "id",
        "kind",
        "reason",
        "run_id",
        "session_id",
        "state",
        "summary",
        "updated_at",
    },
    "queues.api.serializers.AttemptOut": {
        "activated_at",
        "attempt_id",
        "command_id",
        "created_at",
        "failure_kind",
        "failure_message",
        "idempotency_key",
        "payload_hash",
        "previous_attempt_id",
        "reason",
        "retry_index",
        "run_id",
        "runner_job_id",
        "session_id",
        "session_path",
        "state",
        "task_id",
        "terminal_at",
        "updated_at",
    },
    "webhooks.api.serializers.DeliveryOut": {
        "attempt_count",
        "created_at",
        "delivered_at",
        "event_id",
        "event_type",
        "last_error",
        "last_response",
        "last_status_code",
        "next_attempt_at",
        "partition_key",
        "replay_of",
        "run_id",
        "seq",
        "state",
    },
    "webhooks.api.serializers.EndpointOut": {
        "created_at",
        "description",
        "disabled_reason",
        "enabled",
        "event_types",
        "failing_since",
        "id",
        "previous_secret_expires_at",
        "tenant_id",
        "updated_at",
        "url",
    },
}


@pytest.mark.parametrize("path", sorted(PINNED))
def test_an_output_shows_exactly_its_pinned_keys(path: str) -> None:
    module, name = path.rsplit(".", 1)
    serializer = getattr(importlib.import_module(module), name)
    assert set(serializer.Meta.fields) == PINNED[path]
    assert len(serializer.Meta.fields) == len(PINNED[path]), "a key listed twice"


def test_no_output_shows_a_secret_or_a_lease_owner() -> None:
    shown = set().union(*PINNED.values())
    assert not shown & {"secret", "previous_secret", "key_digest", "lease_owner", "request_key"}


@pytest.mark.django_db(transaction=True)
def test_an_appends_answer_is_event_out_of_its_events() -> None:
    """The append's answer (`appended_events_out`, field by field) is `EventOut` exactly,
    of the events it returns and of the rows as stored."""
    from django.db import transaction

    from runs.api.outputs import EventOut, appended_events_out
    from runs.locks import lock_run
    from runs.models import Event
    from runs.services.event_log import NewEvent, append_events_locked
    from tests.builders import make_run

    run = make_run()
    payloads = [{"stream": "stdout", "message": "é\u2028"}, {}, {"nested": {"a": [1, 2.5, None]}}]
    with transaction.atomic():
        appended = append_events_locked(
            run=lock_run(run.id), events=[NewEvent("log", p) for p in payloads]
        )
    answer = appended_events_out(appended)
    assert answer == EventOut(appended, many=True).data
    stored = Event.objects.filter(run_id=run.id).order_by("seq")
    assert answer == EventOut(stored, many=True).data
    assert [list(item) for item in answer] == [list(EventOut.Meta.fields)] * len(payloads)
    assert [item["payload"] for item in answer] == payloads
