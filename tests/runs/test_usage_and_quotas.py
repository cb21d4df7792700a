"""Usage, budgets and tenant quotas (SPEC §9.4): the sums add up to the token events
exactly, bad budgets and usage payloads are 400s, a tenant over its quota gets 429
`quota_exceeded` with Retry-After on new turns and tasks, and sessions show and filter
the approvals that wait for a person."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from agentrun.metrics import REGISTRY
from runs.control_models import TenantQuota
from runs.models import Event, Run
from runs.services import approvals
from runs.services.command_lifecycle import create_command
from runs.services.lifecycle import claim_run
from runs.services.quotas import set_tenant_quota
from tests.builders import key_client, make_run
from tests.queues.helpers import task_body
from tests.sessions.helpers import turn_body

pytestmark = pytest.mark.django_db
API = "/api/v1"


def _claimed(**spec: Any) -> Run:
    run = make_run(**spec)
    create_command(run_id=run.id, type="turn", payload={"text": "hi"})
    return claim_run(run_id=run.id, runner_id="r1", lease_ms=60_000)


def _post_usage(run: Run, *payloads: dict[str, Any]) -> Any:
    runner = key_client(role="runner", run_id=run.id, tenant_id=run.tenant_id)
    events = [{"type": "token_usage", "payload": p} for p in payloads]
    body = {"runner_id": "r1", "lease_epoch": run.lease_epoch, "events": events}
    return runner.post(f"{API}/runs/{run.id}/events", body, format="json")


def _tokens_counted(kind: str) -> float:
    value = REGISTRY.get_sample_value(
        "agentrun_tokens_total", {"backend_profile": "scripted", "kind": kind}
    )
    return value or 0.0


def test_run_and_session_usage_add_up_to_the_token_events() -> None:
    session = {"session_id": "s-usage", "metadata": {}}
    first, second = _claimed(session_ref=session), _claimed(session_ref=session)
    before = _tokens_counted("total")
    a = {"model": "m1", "input_tokens": 10, "cached_input_tokens": 4, "output_tokens": 5}
    assert (
        _post_usage(
            first, {**a, "total_tokens": 15}, {"model": "m2", "total_tokens": 7}
        ).status_code
        == 201
    )
    b = {"input_tokens": 1, "output_tokens": 2, "reasoning_output_tokens": 3, "total_tokens": 3}
    assert _post_usage(second, b).status_code == 201
    client = key_client(role="client")
    run_usage = client.get(f"{API}/runs/{first.id}/usage").json()
    assert run_usage["total_tokens"] == 22 and run_usage["input_tokens"] == 10
    assert run_usage["by_model"]["m1"]["cached_input_tokens"] == 4
    assert run_usage["by_model"]["m2"]["total_tokens"] == 7 and run_usage["events"] == 2
    key_client(role="client").put(f"{API}/sessions/s-usage", {"title": "t"}, format="json")
    session_usage = client.get(f"{API}/sessions/s-usage/usage").json()
    stored = Event.objects.filter(type="token_usage", run__in=[first, second])
    assert session_usage["total_tokens"] == sum(e.payload["total_tokens"] for e in stored) == 25
    assert (
        session_usage["reasoning_tokens"] == 3
        and session_usage["by_model"]["unknown"]["events"] == 1
    )
    assert _tokens_counted("total") - before == 25
    operator = key_client(role="operator")
    since = (timezone.now() - timedelta(minutes=1)).isoformat()
    everyone = operator.get(f"{API}/usage", {"tenant_id": "tenant-a", "since": since}).json()
    assert everyone["total_tokens"] == 25
    later = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert operator.get(f"{API}/usage", {"since": later}).json()["total_tokens"] == 0
    assert client.get(f"{API}/usage").status_code == 403
    assert (
        key_client(role="client", tenant_id="tenant-b")
        .get(f"{API}/runs/{first.id}/usage")
        .status_code
        == 404
    )


@pytest.mark.parametrize(
    "payload",
    [
        {"total_tokens": "12"},
        {"input_tokens": -1},
        {"output_tokens": 1.5},
        {"total_tokens": True},
        {"model": 3},
    ],
)
def test_a_token_usage_event_with_bad_counts_is_a_400(payload: dict[str, Any]) -> None:
    run = _claimed()
    response = _post_usage(run, payload)
    assert response.status_code == 400 and "events.0.payload" in response.json()["error"]["message"]
    assert not Event.objects.filter(run=run, type="token_usage").exists()


@pytest.mark.parametrize(
    "budget",
    [
        0,
        -5,
        "100",
        1.5,
        True,
        None,
        [],
        {},
        {"max_total_tokens": 10, "other": 1},
        {"max_total_tokens": 0},
    ],
)
def test_a_budget_that_is_not_a_positive_integer_is_a_400(budget: Any) -> None:
    client = key_client(role="client")
    run_body = {
        "project_id": "p",
        "workspace_ref": {"path": "/w"},
        "provider_id": "openai",
        "backend_profile": "scripted",
        "execution_policy": {"budget": budget},
    }
    response = client.post(f"{API}/runs", run_body, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["details"]["field"] == "execution_policy.budget"
    turn = turn_body("hi")
    turn["run"]["execution_policy"] = {"budget": budget}
    assert client.post(f"{API}/sessions/s-b/turns", turn, format="json").status_code == 400
    assert not Run.objects.exists()


def test_a_positive_budget_is_accepted_and_passed_through_a_session_turn() -> None:
    turn = turn_body("hi")
    turn["run"]["execution_policy"] = {"budget": {"max_total_tokens": 1000}}
    response = key_client(role="client").post(f"{API}/sessions/s-ok/turns", turn, format="json")
    assert response.status_code == 201
    assert Run.objects.get().execution_policy["budget"] == {"max_total_tokens": 1000}


def test_a_tenant_over_its_quota_gets_429_on_new_turns_and_tasks() -> None:
    run = _claimed()
    assert _post_usage(run, {"total_tokens": 600}).status_code == 201
    operator = key_client(role="operator")
    put = operator.put(f"{API}/quotas/tenant-a", {"max_tokens_per_day": 500}, format="json")
    assert put.status_code == 200 and put.json()["max_tokens_per_day"] == 500
    assert (
        key_client(role="client")
        .put(f"{API}/quotas/tenant-a", {"max_tokens_per_day": 1}, format="json")
        .status_code
        == 403
    )
    client = key_client(role="client")
    refused = [
        client.post(f"{API}/sessions/s-q/turns", turn_body("hi"), format="json"),
        client.post(f"{API}/queue/tasks", task_body(idempotency_key="q1"), format="json"),
        client.post(
            f"{API}/runs/{run.id}/commands",
            {"type": "turn", "payload": {"text": "x"}},
            format="json",
        ),
    ]
    for response in refused:
        assert response.status_code == 429, response.json()
        assert response.json()["error"]["code"] == "quota_exceeded"
        assert 1 <= int(response["Retry-After"]) <= 24 * 3600 + 1
    steer = client.post(
        f"{API}/runs/{run.id}/commands", {"type": "steer", "payload": {"text": "x"}}, format="json"
    )
    assert steer.status_code == 201  # a steer is not a new turn
    other = key_client(role="client", tenant_id="tenant-b")
    assert (
        other.post(f"{API}/sessions/s-other/turns", turn_body("hi"), format="json").status_code
        == 201
    )
    assert operator.delete(f"{API}/quotas/tenant-a").status_code == 204
    assert (
        client.post(f"{API}/sessions/s-q/turns", turn_body("hi"), format="json").status_code == 201
    )
    assert not TenantQuota.objects.exists()


def test_a_quota_counts_only_the_last_24_hours() -> None:
    run = _claimed()
    _post_usage(run, {"total_tokens": 600})
    Event.objects.filter(type="token_usage").update(created_at=timezone.now() - timedelta(hours=25))
    set_tenant_quota(tenant_id="tenant-a", max_tokens_per_day=500)
    response = key_client(role="client").post(
        f"{API}/sessions/s-q2/turns", turn_body("hi"), format="json"
    )
    assert response.status_code == 201


def _session_asking(session_id: str) -> tuple[Run, Any]:
    admitted = key_client(role="client").post(
        f"{API}/sessions/{session_id}/turns", turn_body("hi"), format="json"
    )
    run_id, command_id = admitted.json()["run"]["id"], admitted.json()["command"]["id"]
    run = claim_run(run_id=run_id, runner_id="r1", lease_ms=60_000)
    request = approvals.ApprovalRequest(command_id, "k", "command", "run: ls", {}, 60)
    asked = approvals.request_approval(
        run_id=run.id, runner_id="r1", lease_epoch=run.lease_epoch, request=request
    )
    return run, asked.approval


def test_sessions_show_and_filter_what_needs_action() -> None:
    run, approval = _session_asking("s-act")
    client = key_client(role="client")
    client.post(f"{API}/sessions/s-calm/turns", turn_body("hi"), format="json")
    listed = client.get(f"{API}/sessions", {"state": "needs_action"}).json()["items"]
    assert [(s["session_id"], s["pending_approvals"]) for s in listed] == [("s-act", 1)]
    summary = client.get(f"{API}/sessions/s-act").json()
    assert summary["requires_action"] is True and summary["pending_approvals"] == 1
    everything = client.get(f"{API}/sessions").json()["items"]
    assert {s["session_id"]: s["pending_approvals"] for s in everything} == {
        "s-act": 1,
        "s-calm": 0,
    }
    client.post(f"{API}/runs/{run.id}/approvals/{approval.id}", {"decision": "deny"}, format="json")
    assert client.get(f"{API}/sessions", {"state": "needs_action"}).json()["items"] == []
    assert (
        key_client(role="client", tenant_id="tenant-b")
        .get(f"{API}/sessions", {"state": "needs_action"})
        .json()["items"]
        == []
    )
