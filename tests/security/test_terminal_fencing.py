"""Write fencing after a run ends, as a runner (or someone holding its key) tries it: output
posted to a completed or reaper-failed run, under the claiming runner's id or another one,
is refused: the run's own key is revoked with its end (a 401 that changes nothing), and a
key still valid meets the terminal fence, a 409 `run_terminal` and a recorded
`late-write-rejected` event; nothing a runner sends
appears after the run's `terminal_status`, and a terminal report that disagrees with how
the run ended is recorded, not applied."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.models import Event, Run
from runs.services.reaper import reap_expired_leases
from tests.api.helpers import API, claimed_run_with_command, fencing, runner_for
from tests.builders import make_claimed_run

pytestmark = pytest.mark.django_db

OUTPUT = [{"type": "agent_message", "payload": {"text": "forged after the end"}}]


def _post_output(runner: APIClient, run: Run, runner_id: str) -> Any:
    body = {**fencing(run, runner_id), "events": OUTPUT}
    return runner.post(f"{API}/runs/{run.id}/events", body, format="json")


def _after_terminal_status(run: Run) -> list[Event]:
    terminal = Event.objects.get(run=run, type="terminal_status")
    return list(Event.objects.filter(run=run, seq__gt=terminal.seq).order_by("seq"))


def _assert_refused_and_recorded(run: Run, runner: APIClient, runner_ids: list[str]) -> None:
    for runner_id in runner_ids:
        answer = _post_output(runner, run, runner_id)
        assert answer.status_code == 409, answer.content
        assert answer.json()["error"]["code"] == "run_terminal"
    after = _after_terminal_status(run)
    assert [e.type for e in after] == ["backend_status"] * len(runner_ids)
    assert [e.payload["phase"] for e in after] == ["late-write-rejected"] * len(runner_ids)
    assert [e.payload["runner_id"] for e in after] == runner_ids
    assert all(e.payload["rejected_types"] == ["agent_message"] for e in after)
    assert not Event.objects.filter(run=run, type="agent_message").exists()


def test_output_to_a_completed_run_is_refused_from_any_runner_id() -> None:
    run, _, runner = claimed_run_with_command()
    finished = runner.post(
        f"{API}/runs/{run.id}/finish",
        {**fencing(run), "terminal_status": "completed"},
        format="json",
    )
    assert finished.status_code == 200, finished.content
    # The run's key died with it (a 401 that changes nothing); a key that is still valid
    # (issued in the race with the end) meets the terminal fence: a 409, recorded.
    assert _post_output(runner, run, "runner-1").status_code == 401
    assert _after_terminal_status(run) == []
    _assert_refused_and_recorded(run, runner_for(run), ["runner-1", "someone-else"])


def test_output_to_a_reaper_failed_run_is_refused_and_its_late_finish_recorded() -> None:
    run = make_claimed_run(runner_id="runner-1", lease_ms=0)  # the lease lapses at once
    assert reap_expired_leases(limit=10, grace_ms=0).reaped == 1
    assert Run.objects.get(pk=run.pk).status == "failed"
    runner = runner_for(run)
    _assert_refused_and_recorded(run, runner, ["runner-1", "zombie"])
    late_finish = runner.post(
        f"{API}/runs/{run.id}/finish",
        {**fencing(run), "terminal_status": "completed"},
        format="json",
    )
    assert late_finish.status_code == 200 and late_finish.json()["status"] == "failed"
    recorded = _after_terminal_status(run)[-1].payload
    assert (recorded["phase"], recorded["source"]) == ("late-write-rejected", "run-status")
    assert recorded["refused"]["terminal_status"] == "completed"
    assert Run.objects.get(pk=run.pk).status == "failed"


def test_a_heartbeat_to_an_ended_run_extends_nothing() -> None:
    run, _, runner = claimed_run_with_command()
    runner.post(
        f"{API}/runs/{run.id}/finish", {**fencing(run), "terminal_status": "completed"}, "json"
    )
    beat = runner_for(run).post(f"{API}/runs/{run.id}/heartbeat", fencing(run), format="json")
    assert beat.status_code == 200 and beat.json()["status"] == "completed"
    ended = Run.objects.get(pk=run.pk)
    assert ended.lease_expires_at is None or ended.claimed_by is None
    assert _after_terminal_status(run) == []
