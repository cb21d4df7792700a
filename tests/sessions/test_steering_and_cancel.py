"""Steering the active turn and cancelling a session, over HTTP."""

from __future__ import annotations

import pytest

from runs.control_models import CancelRequest
from runs.models import Command, Event, Run
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.sessions.helpers import admit
from tests.sessions.world import API, claim, finish_turn, idle_session, phases, session, written

pytestmark = pytest.mark.django_db


def _steer(session_id: str, text: str, **extra: object) -> object:
    body = {"payload": {"text": text}, **extra}
    return key_client(role="client").post(f"{API}/sessions/{session_id}/steer", body, format="json")


def test_a_steer_during_an_active_turn_lands_on_that_run_with_the_next_seq() -> None:
    active = admit("s-steer", "first")
    claim(active.run.id)
    first = _steer("s-steer", "look at the tests too")
    assert first.status_code == 201, first.json()
    assert (first.json()["run_id"], first.json()["type"], first.json()["seq"]) == (
        active.run.id,
        "steer",
        2,
    )
    second = _steer("s-steer", "and the docs")
    assert second.status_code == 201 and second.json()["seq"] == 3
    steers = Command.objects.filter(run_id=active.run.id, type="steer").order_by("seq")
    assert [c.payload["text"] for c in steers] == ["look at the tests too", "and the docs"]
    message = Event.objects.filter(run_id=active.run.id, type="user_message").order_by("-seq")[0]
    assert message.payload["command_id"] == second.json()["id"]
    now = session("s-steer")
    assert now.active_command_id == active.command.id
    assert now.last_command_id == second.json()["id"]
    assert Run.objects.count() == 1


def test_a_steer_replayed_with_its_key_returns_the_same_command() -> None:
    active = admit("s-steer-key", "first")
    first = _steer("s-steer-key", "more", idempotency_key="steer-1")
    assert first.status_code == 201
    before = written()
    again = _steer("s-steer-key", "more", idempotency_key="steer-1")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert written() == before
    assert Command.objects.filter(run_id=active.run.id).count() == 2


def test_a_steer_with_no_active_turn_is_a_conflict() -> None:
    idle_session("s-idle")
    before = written()
    error = error_of(_steer("s-idle", "hello?"), 409)
    assert error["code"] == "no_active_turn"
    assert written() == before


def test_a_steer_after_the_turn_finished_is_a_conflict() -> None:
    active = admit("s-done", "first")
    run = claim(active.run.id)
    finish_turn(run, active.command.id)
    before = written()
    assert error_of(_steer("s-done", "too late"), 409)["code"] == "no_active_turn"
    assert written() == before


def test_a_steer_expecting_another_turn_is_a_conflict() -> None:
    active = admit("s-steer-expect", "first")
    error = error_of(_steer("s-steer-expect", "x", expected_turn_id="cmd_old"), 409)
    assert error["code"] == "stale_turn" and error["details"]["active_turn_id"] == active.command.id
    assert Command.objects.count() == 1


def test_a_steer_on_another_tenants_session_is_not_found() -> None:
    admit("s-theirs", "first", tenant_id="tenant-b")
    before = written()
    response = key_client(role="client", tenant_id="tenant-a").post(
        f"{API}/sessions/s-theirs/steer", {"payload": {"text": "hi"}}, format="json"
    )
    assert error_of(response, 404)["code"] == "not_found"
    assert written() == before


def test_cancelling_a_session_cancels_its_active_turn_with_its_stages() -> None:
    active = admit("s-cancel", "first")
    claim(active.run.id)
    response = key_client(role="client").post(
        f"{API}/sessions/s-cancel/cancel", {"reason": "user pressed stop"}, format="json"
    )
    assert response.status_code == 200, response.json()
    receipt = response.json()
    assert receipt["changed"] is True
    assert receipt["run"]["id"] == active.run.id and receipt["run"]["status"] == "cancelled"
    assert receipt["cancel_request"]["stage"] == "terminalized"
    assert receipt["cancel_request"]["reason"] == "user pressed stop"
    assert "cancel-terminalized" in phases(active.run.id)
    now = session("s-cancel")
    assert (now.execution_state, now.terminal_status, now.active_run_id) == (
        "terminal",
        "cancelled",
        None,
    )


def test_cancelling_a_session_without_an_active_turn_changes_nothing() -> None:
    idle = idle_session("s-cancel-idle")
    before = written()
    response = key_client(role="client").post(
        f"{API}/sessions/s-cancel-idle/cancel", {}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {"changed": False, "cancel_request": None, "run": None}
    assert written() == before
    assert CancelRequest.objects.count() == 0
    assert session("s-cancel-idle").version == idle.version


def test_cancelling_another_tenants_session_is_not_found() -> None:
    active = admit("s-cancel-theirs", "first", tenant_id="tenant-b")
    response = key_client(role="client").post(
        f"{API}/sessions/s-cancel-theirs/cancel", {}, format="json"
    )
    assert error_of(response, 404)["code"] == "not_found"
    assert Run.objects.get(pk=active.run.id).status == "pending"
