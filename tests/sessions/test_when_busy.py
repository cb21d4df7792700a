"""`when_busy` and `expected_turn_id`: the busy decision is made under the session lock."""

from __future__ import annotations

import pytest

from runs.models import Command, Run
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.sessions.helpers import admit, turn_body
from tests.sessions.world import claim, phases, post_turn, session, written

pytestmark = pytest.mark.django_db


def test_when_busy_steer_adds_a_steer_to_the_active_turn() -> None:
    active = admit("s-steer", "first")
    response = post_turn(
        key_client(role="client"), "s-steer", {**turn_body("also this"), "when_busy": "steer"}
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["disposition"] == "steered"
    assert body["run"]["id"] == active.run.id
    assert (body["command"]["type"], body["command"]["seq"]) == ("steer", 2)
    assert Run.objects.count() == 1
    now = session("s-steer")
    assert now.active_command_id == active.command.id
    assert now.last_command_id == body["command"]["id"]


def test_retrying_a_steered_admission_with_its_key_replays_the_steer() -> None:
    admit("s-steer-retry", "first")
    api = key_client(role="client")
    body = {**turn_body("also this", idempotency_key="k-steer"), "when_busy": "steer"}
    first = post_turn(api, "s-steer-retry", body)
    assert first.status_code == 200 and first.json()["disposition"] == "steered"
    before = written()
    again = post_turn(api, "s-steer-retry", body)
    assert again.status_code == 200, again.json()
    assert again.json()["disposition"] == "replayed"
    assert again.json()["command"]["id"] == first.json()["command"]["id"]
    assert again.json()["command"]["type"] == "steer"
    assert written() == before
    other = {**turn_body("something else", idempotency_key="k-steer"), "when_busy": "steer"}
    assert error_of(post_turn(api, "s-steer-retry", other), 409)["code"] == "idempotency_mismatch"
    assert written() == before


def test_when_busy_interrupt_cancels_the_active_run_and_admits_the_new_turn() -> None:
    active = admit("s-interrupt", "first")
    claim(active.run.id)
    response = post_turn(
        key_client(role="client"),
        "s-interrupt",
        {**turn_body("stop, do this"), "when_busy": "interrupt"},
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["disposition"] == "interrupted_and_created"
    assert body["run"]["id"] != active.run.id
    assert body["cancel_request"]["stage"] == "terminalized"
    assert body["cancel_request"]["run_id"] == active.run.id

    cancelled = Run.objects.get(pk=active.run.id)
    assert (cancelled.status, cancelled.failure_kind) == ("cancelled", "cancelled")
    assert Command.objects.get(pk=active.command.id).state == "cancelled"
    stages = [p for p in phases(active.run.id) if p.startswith("cancel-") or p == "terminal_status"]
    assert stages == [
        "cancel-accepted",
        "cancel-persisted",
        "cancel-delivered",
        "cancel-aborting",
        "terminal_status",
        "cancel-terminalized",
    ]
    now = session("s-interrupt")
    assert (now.execution_state, now.active_run_id, now.active_command_id) == (
        "running",
        body["run"]["id"],
        body["command"]["id"],
    )


def test_a_stale_expected_turn_id_is_a_conflict_and_changes_nothing() -> None:
    active = admit("s-expected", "first")
    before = written()
    for when_busy in ("reject", "steer", "interrupt"):
        body = {**turn_body("next"), "when_busy": when_busy, "expected_turn_id": "cmd_gone"}
        error = error_of(post_turn(key_client(role="client"), "s-expected", body), 409)
        assert error["code"] == "stale_turn"
        assert error["details"]["active_turn_id"] == active.command.id
    assert written() == before
    assert Run.objects.get(pk=active.run.id).status == "pending"


def test_the_right_expected_turn_id_lets_the_decision_through() -> None:
    active = admit("s-expected-ok", "first")
    body = {**turn_body("more"), "when_busy": "steer", "expected_turn_id": active.command.id}
    response = post_turn(key_client(role="client"), "s-expected-ok", body)
    assert response.status_code == 200 and response.json()["disposition"] == "steered"


def test_expecting_a_turn_on_an_idle_session_is_a_conflict() -> None:
    active = admit("s-expected-idle", "first")
    key = key_client(role="client")
    assert key.post("/api/v1/sessions/s-expected-idle/cancel", {}, format="json").status_code == 200
    assert session("s-expected-idle").active_command_id is None
    before = written()
    body = {**turn_body("next"), "expected_turn_id": active.command.id}
    error = error_of(post_turn(key, "s-expected-idle", body), 409)
    assert error["code"] == "stale_turn" and error["details"]["active_turn_id"] is None
    assert written() == before
