"""Turn admission, one request at a time: created, replayed, recovered, stale takeover, busy."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from dispatch.models import RunnerDispatchIntent
from runs.models import Command, Event, Run
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.sessions.helpers import admit, turn_body
from tests.sessions.world import claim, phases, post_turn, session, written

pytestmark = pytest.mark.django_db


def _expire_lease(run_id: str) -> None:
    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))


def test_a_turn_whose_runner_lease_expired_is_failed_and_the_new_turn_admitted() -> None:
    old = admit("s-stale", "first turn")
    claim(old.run.id, runner_id="runner-dead")
    _expire_lease(old.run.id)
    response = post_turn(key_client(role="client"), "s-stale", turn_body("second turn"))
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["disposition"] == "created" and body["run"]["id"] != old.run.id

    stale = Run.objects.get(pk=old.run.id)
    assert (stale.status, stale.failure_kind, stale.claimed_by) == ("failed", "infra-failed", None)
    assert Command.objects.get(pk=old.command.id).state == "failed"
    assert phases(old.run.id)[-3:] == [
        "session-turn-admission-stale-terminalized",
        "command-terminal",
        "terminal_status",
    ]
    events = Event.objects.filter(run_id=old.run.id).order_by("-seq")
    terminal, command_terminal, stale_event = events[0], events[1], events[2]
    assert terminal.payload["failure_kind"] == "infra-failed"
    assert command_terminal.payload["command_id"] == old.command.id
    assert command_terminal.payload["failure_kind"] == "infra-failed"
    assert stale_event.payload["claimed_by"] == "runner-dead"
    assert stale_event.payload["command_id"] == old.command.id

    now = session("s-stale")
    assert (now.execution_state, now.active_run_id, now.active_command_id) == (
        "running",
        body["run"]["id"],
        body["command"]["id"],
    )


def test_a_turn_whose_runner_lease_is_live_keeps_the_session_busy() -> None:
    old = admit("s-live", "first turn")
    claim(old.run.id)
    before = written()
    error = error_of(post_turn(key_client(role="client"), "s-live", turn_body("next")), 409)
    assert error["code"] == "session_busy" and error["details"]["active_run_id"] == old.run.id
    assert written() == before
    assert Run.objects.get(pk=old.run.id).status == "claimed"


def test_replaying_an_idempotency_key_returns_the_same_turn_and_writes_nothing() -> None:
    api = key_client(role="client")
    first = post_turn(api, "s-replay", turn_body("do it", idempotency_key="k-1"))
    assert first.status_code == 201
    before = written()
    again = post_turn(api, "s-replay", turn_body("do it", idempotency_key="k-1"))
    assert again.status_code == 200 and again.json()["disposition"] == "replayed"
    assert again.json()["run"]["id"] == first.json()["run"]["id"]
    assert again.json()["command"]["id"] == first.json()["command"]["id"]
    assert written() == before


def test_an_idempotency_key_reused_for_another_text_is_a_conflict() -> None:
    api = key_client(role="client")
    assert (
        post_turn(api, "s-mismatch", turn_body("do it", idempotency_key="k-1")).status_code == 201
    )
    before = written()
    error = error_of(post_turn(api, "s-mismatch", turn_body("else", idempotency_key="k-1")), 409)
    assert error["code"] == "idempotency_mismatch"
    assert written() == before


def test_a_turn_written_without_its_dispatch_intent_is_recovered_then_replayed() -> None:
    api = key_client(role="client")
    first = post_turn(api, "s-recover", turn_body("build", idempotency_key="k-rec", dispatch=None))
    assert first.status_code == 201
    command_id = first.json()["command"]["id"]
    assert not RunnerDispatchIntent.objects.exists()

    recovered = post_turn(
        api, "s-recover", turn_body("build", idempotency_key="k-rec", dispatch={})
    )
    assert recovered.status_code == 200, recovered.json()
    assert recovered.json()["disposition"] == "recovered"
    intent = RunnerDispatchIntent.objects.get(command_id=command_id)
    assert recovered.json()["command"]["dispatch_intent"]["id"] == intent.id
    event = Event.objects.filter(run_id=first.json()["run"]["id"]).order_by("-seq").first()
    assert event is not None and event.payload["phase"] == "runner-dispatch-recovered"
    assert event.payload["dispatch_intent_id"] == intent.id
    assert event.payload["command_id"] == command_id

    before = written()
    replayed = post_turn(api, "s-recover", turn_body("build", idempotency_key="k-rec", dispatch={}))
    assert replayed.status_code == 200 and replayed.json()["disposition"] == "replayed"
    assert written() == before


def test_a_turn_in_a_new_session_dispatches_a_runner_by_default() -> None:
    body = turn_body("go")
    del body["command"]["dispatch"]
    response = post_turn(key_client(role="client"), "s-dispatch", body)
    assert response.status_code == 201
    assert RunnerDispatchIntent.objects.filter(command_id=response.json()["command"]["id"]).exists()
