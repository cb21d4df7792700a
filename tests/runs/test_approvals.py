"""Approvals (SPEC §9.3): records, answers, replay, 409s, expiry and cancel, and the races
between them with real threads on the database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentrun.errors import AgentRunError
from runs.control_models import Approval
from runs.models import Event, Run
from runs.services import approvals
from runs.services.cancellation import cancel_run
from runs.services.command_lifecycle import ack_command, create_command
from runs.services.lifecycle import claim_run
from tests.builders import key_client, make_run
from tests.runs.threads import race

API = "/api/v1"


def _asking_run(*, tenant_id: str = "tenant-a", ttl_s: int = 3600) -> tuple[Run, Approval]:
    run = make_run(tenant_id=tenant_id)
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    run = claim_run(run_id=run.id, runner_id="runner-1", lease_ms=60_000)
    ack_command(command_id=command.id, runner_id="runner-1", lease_epoch=run.lease_epoch)
    result = approvals.request_approval(
        run_id=run.id,
        runner_id="runner-1",
        lease_epoch=run.lease_epoch,
        request=approvals.ApprovalRequest(
            command_id=command.id,
            request_key="cmd:touch x:1",
            kind="command",
            summary="touch x",
            details={"command": "touch x"},
            ttl_s=ttl_s,
        ),
    )
    assert result.changed
    return Run.objects.get(pk=run.id), result.approval


def _types(run: Run) -> list[str]:
    return list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))


@pytest.mark.django_db
def test_a_request_then_an_answer_then_a_replay_and_a_conflict() -> None:
    run, approval = _asking_run()
    client = key_client(role="client")
    url = f"{API}/runs/{run.id}/approvals"
    listed = client.get(url).json()["items"]
    assert [(a["id"], a["state"]) for a in listed] == [(approval.id, "pending")]
    shown = client.get(f"{API}/runs/{run.id}").json()
    assert shown["pending_approvals"] == 1 and shown["requires_action"] is True

    first = client.post(f"{url}/{approval.id}", {"decision": "approve"}, format="json")
    assert first.status_code == 200 and first.json()["state"] == "approved"
    again = client.post(f"{url}/{approval.id}", {"decision": "approve"}, format="json")
    assert again.status_code == 200 and again.json()["decided_at"] == first.json()["decided_at"]
    other = client.post(f"{url}/{approval.id}", {"decision": "deny"}, format="json")
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "approval_decided"
    assert other.json()["error"]["details"]["state"] == "approved"
    assert _types(run).count("approval_resolved") == 1
    assert client.get(f"{API}/runs/{run.id}").json()["requires_action"] is False


@pytest.mark.django_db
def test_the_same_request_again_returns_the_same_record() -> None:
    run, approval = _asking_run()
    again = approvals.request_approval(
        run_id=run.id,
        runner_id="runner-1",
        lease_epoch=run.lease_epoch,
        request=approvals.ApprovalRequest(
            approval.command_id, "cmd:touch x:1", "command", "x", {}, 5
        ),
    )
    assert again.approval.id == approval.id and not again.changed
    assert Approval.objects.count() == 1 and _types(run).count("approval_requested") == 1


@pytest.mark.django_db
def test_bad_answers_are_400_and_another_tenants_approval_is_404() -> None:
    run, approval = _asking_run()
    url = f"{API}/runs/{run.id}/approvals/{approval.id}"
    client = key_client(role="client")
    for body in ({"decision": "maybe"}, {}, {"decision": "approve", "extra": 1}, {"decision": 1}):
        response = client.post(url, body, format="json")
        assert response.status_code == 400, body
        assert response.json()["error"]["code"] == "invalid"
    stranger = key_client(role="client", tenant_id="tenant-b")
    assert stranger.post(url, {"decision": "approve"}, format="json").status_code == 404
    assert stranger.get(f"{API}/runs/{run.id}/approvals").status_code == 404
    missing = client.post(
        f"{API}/runs/{run.id}/approvals/apr_nope", {"decision": "deny"}, format="json"
    )
    assert missing.status_code == 404
    runner = key_client(role="runner", run_id=run.id)
    assert runner.post(url, {"decision": "approve"}, format="json").status_code == 403
    assert Approval.objects.get().state == "pending"


@pytest.mark.django_db
def test_a_runner_records_over_http_with_its_fence() -> None:
    run = make_run()
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    run = claim_run(run_id=run.id, runner_id="r1", lease_ms=60_000)
    runner = key_client(role="runner", run_id=run.id)
    body: dict[str, Any] = {
        "runner_id": "r1",
        "lease_epoch": run.lease_epoch,
        "command_id": command.id,
        "request_key": "k1",
        "kind": "command",
        "summary": "ls",
    }
    created = runner.post(f"{API}/runs/{run.id}/approvals", body, format="json")
    assert created.status_code == 201, created.json()
    replay = runner.post(f"{API}/runs/{run.id}/approvals", body, format="json")
    assert replay.status_code == 200 and replay.json()["id"] == created.json()["id"]
    stale = runner.post(
        f"{API}/runs/{run.id}/approvals",
        {**body, "lease_epoch": 99, "request_key": "k2"},
        format="json",
    )
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_lease"
    client = key_client(role="client")
    assert client.post(f"{API}/runs/{run.id}/approvals", body, format="json").status_code == 403


@pytest.mark.django_db
def test_expiry_resolves_expired_and_an_answer_after_it_is_a_409() -> None:
    run, approval = _asking_run(ttl_s=1)
    later = timezone.now() + timedelta(seconds=5)
    assert approvals.expire_due_approvals(limit=10, now=later) == 1
    assert Approval.objects.get().state == "expired"
    assert Run.objects.get(pk=run.id).pending_approvals == 0
    with pytest.raises(AgentRunError) as raised:
        approvals.answer_approval(
            run_id=run.id, approval_id=approval.id, decision="approve", reason=None, decided_by="k"
        )
    assert raised.value.code == "approval_decided"


@pytest.mark.django_db
def test_a_cancel_resolves_pending_approvals_cancelled() -> None:
    run, _ = _asking_run()
    cancel_run(run_id=run.id, reason="stop")
    assert Approval.objects.get().state == "cancelled"
    resolved = Event.objects.get(run=run, type="approval_resolved")
    assert resolved.payload["state"] == "cancelled"
    assert Run.objects.get(pk=run.id).pending_approvals == 0


def _answer(run: Run, approval: Approval, decision: str) -> Any:
    return lambda: approvals.answer_approval(
        run_id=run.id, approval_id=approval.id, decision=decision, reason=None, decided_by=decision
    )


def _cancel(run: Run) -> Any:
    return lambda: cancel_run(run_id=run.id, reason="x")


def _outcomes(results: list[Any]) -> list[str]:
    return sorted(
        r.code if isinstance(r, AgentRunError) else f"ok:{r.approval.state}" for r in results
    )


@pytest.mark.django_db(transaction=True)
def test_two_different_answers_race_one_wins() -> None:
    for _ in range(3):
        run, approval = _asking_run()
        results = race([_answer(run, approval, "approve"), _answer(run, approval, "deny")])
        outcomes = _outcomes(results)
        assert outcomes[0] == "approval_decided" and outcomes[1].startswith("ok:"), results
        stored = Approval.objects.get(pk=approval.id)
        assert f"ok:{stored.state}" == outcomes[1]
        assert Event.objects.filter(run=run, type="approval_resolved").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_answer_races_the_expiry() -> None:
    for _ in range(3):
        run, approval = _asking_run(ttl_s=1)
        Approval.objects.filter(pk=approval.id).update(
            expires_at=timezone.now() + timedelta(milliseconds=20)
        )
        results = race(
            [
                _answer(run, approval, "approve"),
                lambda: approvals.expire_due_approvals(
                    limit=10, now=timezone.now() + timedelta(seconds=1)
                ),
            ]
        )
        stored = Approval.objects.get(pk=approval.id)
        answered, expired = results
        if stored.state == "approved":
            assert expired == 0 and not isinstance(answered, Exception)
        else:
            assert stored.state == "expired"
            assert isinstance(answered, AgentRunError) and answered.code == "approval_decided"
        assert Event.objects.filter(run=run, type="approval_resolved").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_answer_races_a_cancel() -> None:
    for _ in range(3):
        run, approval = _asking_run()
        results = race([_answer(run, approval, "approve"), _cancel(run)])
        stored = Approval.objects.get(pk=approval.id)
        answered = results[0]
        if stored.state == "approved":
            assert not isinstance(answered, Exception)
        else:
            assert stored.state == "cancelled"
            assert isinstance(answered, AgentRunError) and answered.code == "approval_decided"
        assert Event.objects.filter(run=run, type="approval_resolved").count() == 1
        assert Run.objects.get(pk=run.id).status == "cancelled"
