"""A runner forging the server's word: a `backend_status` event with a phase only the
server writes (`command-terminal`, `run-claimed`, `cancel-terminalized`, …) is a 400 naming
the field, and nothing of the batch is stored; the runner's own phases still pass."""

from __future__ import annotations

import pytest

from runs.models import Event
from runs.phases import Phase
from tests.api.helpers import API, claimed_run_with_command, fencing

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "phase", [Phase.COMMAND_TERMINAL, Phase.RUN_CLAIMED, "cancel-terminalized"]
)
def test_a_runner_cannot_post_a_server_phase(phase: str) -> None:
    run, _, runner = claimed_run_with_command()
    before = Event.objects.filter(run=run).count()
    forged = {"type": "backend_status", "payload": {"phase": str(phase), "status": "completed"}}
    body = {**fencing(run), "events": [{"type": "log", "payload": {"line": "x"}}, forged]}
    answer = runner.post(f"{API}/runs/{run.id}/events", body, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["details"]["field"].startswith("events")
    assert Event.objects.filter(run=run).count() == before


def test_a_runner_phase_still_passes() -> None:
    run, _, runner = claimed_run_with_command()
    body = {**fencing(run), "type": "backend_status", "payload": {"phase": "thread-started"}}
    answer = runner.post(f"{API}/runs/{run.id}/events", body, format="json")
    assert answer.status_code in (200, 201), answer.content
