"""A token budget stops a real Codex turn midway (SPEC §9.4): through the reference runner
and the live API, the first model response's usage crosses a 1-token budget, the runner
interrupts codex, and the turn and run end `failed` `budget-exceeded` after a
`budget_reached` event; the usage endpoint adds up to the token events."""

from __future__ import annotations

from typing import Any

import pytest

from runs.models import Command, Event
from runs.services.command_lifecycle import create_command
from tests.builders import key_client, make_run
from tests.codex.conftest import Harness, mock_policy
from tests.runner.helpers import start_runner

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_budget_interrupts_a_codex_turn(live_server: Any, codex: Harness) -> None:
    run = make_run(
        backend_profile="codex",
        workspace_ref={"path": str(codex.workspace)},
        execution_policy=mock_policy(budget={"max_total_tokens": 1}),
    )
    payload = {"text": "run: echo hi-from-tool"}
    turn = create_command(run_id=run.id, type="turn", payload=payload).command
    runner = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=10_000)
    out, _ = runner.communicate(timeout=90)
    assert runner.returncode == 0, out
    run.refresh_from_db()
    assert (run.status, run.failure_kind) == ("failed", "budget-exceeded"), out
    assert Command.objects.get(pk=turn.pk).state == "failed"
    (reached,) = Event.objects.filter(run=run, type="budget_reached")
    assert reached.payload["max_total_tokens"] == 1 and reached.payload["turn_tokens"] > 1
    usage_events = Event.objects.filter(run=run, type="token_usage")
    assert usage_events.count() == 1
    usage = key_client(role="client").get(f"/api/v1/runs/{run.id}/usage").json()
    assert usage["total_tokens"] == usage_events.get().payload["total_tokens"] > 1
    assert list(usage["by_model"]) == ["mock-model"]
    statuses = Event.objects.filter(run=run, type="backend_status").values_list(
        "payload", flat=True
    )
    assert not any(p.get("terminal_status") == "completed" for p in statuses)
