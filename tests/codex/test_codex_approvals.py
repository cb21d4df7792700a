"""The real Codex binary (offline, loopback mock Responses server) asks to run a command
outside its sandbox under `approval_policy: ask`; a person answers over HTTP (SPEC §9.3).

Through the reference runner subprocess and the live API: an approval lets the command run
and the turn complete; a denial tells the agent so; a runner killed while the approval is
pending leaves it pending, and the next runner of the run gets the answer given meanwhile
when codex asks the same thing again — one approval, never a second request.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest
from django.utils import timezone

from runs.control_models import Approval
from runs.models import Backend, Command, Event, Run
from runs.services.command_lifecycle import create_command
from tests.builders import key_client, make_run
from tests.codex.conftest import Harness, mock_policy
from tests.runner.helpers import start_runner, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
API = "/api/v1"
ESCALATE = "escalate: touch escalated.txt"


def _asking_codex_run(codex: Harness) -> tuple[Run, Command]:
    # The operator allows `ask` on the profile: a person's yes runs outside the sandbox.
    Backend.objects.filter(profile="codex").update(
        policy_ceiling={"approval_policy": ["never", "on-request", "auto", "ask", "deny"]}
    )
    run = make_run(
        backend_profile="codex",
        workspace_ref={"path": str(codex.workspace)},
        execution_policy=mock_policy(approval_policy="ask", sandbox="workspace-write"),
    )
    return run, create_command(run_id=run.id, type="turn", payload={"text": ESCALATE}).command


def _answer(run: Run, approval: Approval, decision: str) -> None:
    url = f"{API}/runs/{run.id}/approvals/{approval.id}"
    response = key_client(role="client").post(url, {"decision": decision}, format="json")
    assert response.status_code == 200, response.json()


def _pending(run: Run) -> Approval | None:
    return Approval.objects.filter(run=run, state="pending").first()


def _of(run: Run, type: str) -> list[dict[str, Any]]:
    return [e.payload for e in Event.objects.filter(run=run, type=type).order_by("seq")]


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_person_decides_what_codex_asked(live_server: Any, codex: Harness, decision: str) -> None:
    run, turn = _asking_codex_run(codex)
    runner = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=10_000)
    approval = wait_for(lambda: _pending(run))
    assert approval.kind == "command" and "touch escalated.txt" in approval.summary
    assert approval.details["reason"] == "mock wants to run outside the sandbox"
    assert not (codex.workspace / "escalated.txt").exists()  # codex waits for the answer
    _answer(run, approval, decision)
    out, _ = runner.communicate(timeout=90)
    assert runner.returncode == 0, out
    assert Command.objects.get(pk=turn.pk).state == "completed", out
    (answered,) = [p for p in _of(run, "backend_status") if p.get("phase") == "approval-answered"]
    created = (codex.workspace / "escalated.txt").exists()
    if decision == "approve":
        assert answered["decision"] == "accept" and created
        assert _of(run, "tool_output")[-1]["exit_code"] == 0
    else:
        assert answered["decision"] == "decline" and not created
        assert "rejected by user" in _of(run, "agent_message")[-1]["text"]
    assert [p["state"] for p in _of(run, "approval_resolved")] == [
        "approved" if decision == "approve" else "denied"
    ]


def test_an_approval_pending_when_the_runner_dies_is_answered_once(
    live_server: Any, codex: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTRUN_CODEX_HOME", str(codex.tmp / "codex-home"))
    run, turn = _asking_codex_run(codex)
    first = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=2000)
    approval = wait_for(lambda: _pending(run))
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    assert Approval.objects.get(pk=approval.id).state == "pending"  # it survives its runner
    _answer(run, approval, "approve")
    wait_for(lambda: Run.objects.get(pk=run.pk).lease_expired(timezone.now()))
    second = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=10_000)
    out, _ = second.communicate(timeout=90)
    assert second.returncode == 0, out
    assert Command.objects.get(pk=turn.pk).state == "completed", out
    assert (codex.workspace / "escalated.txt").exists()
    assert Approval.objects.filter(run=run).count() == 1
    assert len(_of(run, "approval_requested")) == 1
    # The second runner's codex asked again and got the recorded answer at once (the first
    # runner's buffered `approval-requested` status may have died with it, unsent).
    answered = [p for p in _of(run, "backend_status") if p.get("phase") == "approval-answered"]
    assert [p["decision"] for p in answered] == ["accept"]
