"""The reference runner (a real subprocess, scripted backend, live API) under
`approval_policy: ask` and a token budget (SPEC §9.3, §9.4)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from runs.control_models import Approval
from runs.models import Command, Event, Run
from runs.services.command_lifecycle import create_command
from tests.builders import key_client, make_run
from tests.runner.helpers import start_runner

pytestmark = pytest.mark.django_db(transaction=True)
API = "/api/v1"


def _wait_for(condition: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _asking_turn(policy: dict[str, Any]) -> tuple[Run, Command]:
    run = make_run(execution_policy=policy)
    payload = {"text": "make it", "scripted": {"mode": "ask", "command": "touch built.txt"}}
    return run, create_command(run_id=run.id, type="turn", payload=payload).command


def _pending(run: Run) -> Approval | None:
    return Approval.objects.filter(run=run, state="pending").first()


def _tool_outputs(run: Run) -> list[str]:
    events = Event.objects.filter(run=run, type="tool_output").order_by("seq")
    return [e.payload["output"] for e in events]


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_person_answers_over_http_and_the_turn_goes_on(live_server: Any, decision: str) -> None:
    run, turn = _asking_turn({"approval_policy": "ask"})
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    approval = _wait_for(lambda: _pending(run))
    assert (approval.kind, approval.summary) == ("command", "run: touch built.txt")
    client = key_client(role="client")
    shown = client.get(f"{API}/runs/{run.id}").json()
    assert shown["requires_action"] is True and shown["pending_approvals"] == 1
    answered = client.post(
        f"{API}/runs/{run.id}/approvals/{approval.id}",
        {"decision": decision, "reason": "checked"},
        format="json",
    )
    assert answered.status_code == 200
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    assert Command.objects.get(pk=turn.pk).state == "completed"
    outputs = _tool_outputs(run)
    word = "ran" if decision == "approve" else "denied"
    assert outputs[0] == f"{word}: touch built.txt", outputs
    types = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    assert types.count("approval_requested") == 1 and types.count("approval_resolved") == 1
    assert types.index("approval_resolved") < types.index("terminal_status")


def test_deny_refuses_without_asking_anyone(live_server: Any) -> None:
    run, _ = _asking_turn({"approval_policy": "deny"})
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    assert _tool_outputs(run)[0] == "denied: touch built.txt"
    assert not Approval.objects.filter(run=run).exists()


def test_a_pending_approval_survives_its_runner(live_server: Any) -> None:
    """Kill the runner while the approval waits; answer it; the next runner of the run
    asks the same thing and gets the recorded decision: one approval, one answer."""
    run, turn = _asking_turn({"approval_policy": "ask"})
    first = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=2000)
    approval = _wait_for(lambda: _pending(run))
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    client = key_client(role="client")
    url = f"{API}/runs/{run.id}/approvals/{approval.id}"
    assert client.post(url, {"decision": "approve"}, format="json").status_code == 200
    _wait_for(lambda: Run.objects.get(pk=run.pk).lease_expired(timezone.now()))
    second = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=2000)
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0, out
    assert Command.objects.get(pk=turn.pk).state == "completed"
    assert Approval.objects.filter(run=run).count() == 1
    assert Event.objects.filter(run=run, type="approval_requested").count() == 1
    assert _tool_outputs(run) == ["ran: touch built.txt", "make it"]


def test_a_budget_stops_a_scripted_turn_and_the_usage_adds_up(live_server: Any) -> None:
    run = make_run(execution_policy={"budget": {"max_total_tokens": 25}})
    script = {"mode": "long", "ticks": 40, "tick_ms": 30, "usage_per_tick": 5}
    turn = create_command(
        run_id=run.id, type="turn", payload={"text": "spend", "scripted": script}
    ).command
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    run.refresh_from_db()
    assert (run.status, run.failure_kind) == ("failed", "budget-exceeded")
    assert Command.objects.get(pk=turn.pk).state == "failed"
    reached = Event.objects.get(run=run, type="budget_reached")
    assert reached.payload["max_total_tokens"] == 25 and reached.payload["total_tokens"] == 30
    usage_events = Event.objects.filter(run=run, type="token_usage")
    tokens = sum(e.payload["total_tokens"] for e in usage_events)
    assert tokens < 40 * 5  # stopped early
    usage = key_client(role="client").get(f"{API}/runs/{run.id}/usage").json()
    assert usage["total_tokens"] == tokens and usage["events"] == usage_events.count()
    assert usage["by_model"]["scripted"]["output_tokens"] == tokens
