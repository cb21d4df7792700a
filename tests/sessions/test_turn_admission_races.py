"""Turn admission under real concurrency: threads racing over HTTP on their own connections."""

from __future__ import annotations

from typing import Any

import pytest

from runs.models import Command, Run
from sessions.models import Session
from tests.api.helpers import error_of
from tests.runs.threads import race
from tests.sessions.helpers import turn_body
from tests.sessions.world import clients, idle_session, post_turn, session

pytestmark = pytest.mark.django_db(transaction=True)


def _responses(results: list[Any]) -> list[Any]:
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures
    return results


def test_ten_different_turns_to_one_idle_session_admit_exactly_one() -> None:
    idle_session("s-race")
    racers = clients(10)
    results = _responses(
        race(
            [
                lambda c=c, i=i: post_turn(c, "s-race", turn_body(f"turn number {i}"))
                for i, c in enumerate(racers)
            ]
        )
    )
    assert sorted(r.status_code for r in results) == [201] + [409] * 9
    winner = next(r for r in results if r.status_code == 201).json()
    assert winner["disposition"] == "created"
    for loser in (r for r in results if r.status_code == 409):
        error = error_of(loser, 409)
        assert error["code"] == "session_busy"
        assert error["details"]["active_run_id"] == winner["run"]["id"]
        assert error["details"]["active_turn_id"] == winner["command"]["id"]
    assert list(Run.objects.values_list("id", flat=True)) == [winner["run"]["id"]]
    assert list(Command.objects.values_list("id", flat=True)) == [winner["command"]["id"]]
    stored = session("s-race")
    assert (stored.execution_state, stored.active_run_id, stored.active_command_id) == (
        "running",
        winner["run"]["id"],
        winner["command"]["id"],
    )
    assert stored.title == winner["command"]["payload"]["text"]


def test_ten_admissions_with_one_idempotency_key_make_one_run_and_ten_identical_answers() -> None:
    racers = clients(10)
    body = turn_body("deploy the docs", idempotency_key="turn-key-1")
    results = _responses(race([lambda c=c: post_turn(c, "s-same", body) for c in racers]))
    assert sorted(r.status_code for r in results) == [200] * 9 + [201]
    answers = [r.json() for r in results]
    by_status = {r.status_code: r.json()["disposition"] for r in results}
    assert by_status == {201: "created", 200: "replayed"}
    same = [{k: v for k, v in answer.items() if k != "disposition"} for answer in answers]
    assert all(answer == same[0] for answer in same), same
    assert Run.objects.count() == 1 and Command.objects.count() == 1
    assert Session.objects.count() == 1
    assert session("s-same").active_command_id == same[0]["command"]["id"]
