"""`sessions.events.stream` through the real `openai` SDK against the real server (uvicorn,
the production command line): a turn streamed to completion in the SDK's event shapes, and
a stream reconnected mid-turn with the last event id it saw, with no gap and no repeat."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat_openai import world
from tests.compat_openai.world import ENDED, ENVIRONMENT, message, openai, until_idle
from tests.runtime.server import Server, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("settled")]


def test_a_turn_streams_to_completion_in_the_sdks_shapes(server: Server, tmp_path: Path) -> None:
    client = world.client_for(world.server_url(server), "tenant-stream")
    sessions = client.beta.agents.sessions
    session = sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    # The SDK's own helper: subscribe, submit the input, follow the turn to idle.
    with sessions.stream(session.id, input="hello stream") as turn:
        assert world.dispatch_to(world.server_url(server), tmp_path) == 1
        result = turn.with_result_collection().get_final_result()
    assert result.output_text == "Echo: hello stream"
    assert result.turn.status == "completed"

    # The raw stream of a second turn, every event typed by the SDK's union.
    events = sessions.events.stream(session.id)
    sessions.events.create(session.id, events=[message("again")])
    assert world.dispatch_to(world.server_url(server), tmp_path) == 1
    seen = until_idle(events)
    kinds = [e.type for e in seen]
    assert kinds[:3] == [
        "agent.session.turn.created",
        "agent.session.turn.item.added",
        "agent.session.turn.in_progress",
    ]
    for kind in (
        "agent.session.in_progress",
        "agent.session.turn.output_text.delta",
        "agent.session.turn.output_text.done",
        "agent.session.turn.item.done",
        "agent.session.turn.completed",
    ):
        assert kind in kinds, kinds
    assert kinds[-1] == "agent.session.idle" and seen[-1].session.status == "idle"
    assert type(seen[0]).__name__ == "AgentSessionTurnCreatedEvent"
    assert seen[1].item.content[0].text == "again"
    done = [e for e in seen if e.type == "agent.session.turn.item.done"]
    assert done[-1].item.role == "assistant" and done[-1].item.content[0].text == "Echo: again"
    completed = next(e for e in seen if e.type == "agent.session.turn.completed")
    assert completed.turn.id == seen[0].turn_id and completed.usage.total_tokens > 0
    assert len({e.event_id for e in seen}) == len(seen)


def test_a_stream_reconnected_with_its_last_event_id_misses_nothing(
    server: Server, tmp_path: Path
) -> None:
    client = world.client_for(world.server_url(server), "tenant-resume")
    sessions = client.beta.agents.sessions
    session = sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    first = sessions.events.stream(session.id)
    long = {"mode": "long", "ticks": 20, "tick_ms": 100}
    sessions.events.create(session.id, events=[message("count", scripted=long)])
    assert world.dispatch_to(world.server_url(server), tmp_path) == 1
    before = until_idle(first, stop_after=8)  # mid-turn: the ticks are still coming
    assert before[-1].type not in ENDED
    resumed = sessions.events.stream(
        session.id, extra_headers={"Last-Event-ID": before[-1].event_id}
    )
    after = until_idle(resumed)
    assert after[-1].type == "agent.session.idle"

    # The whole turn read again from its first event: the two halves are exactly it.
    whole = until_idle(
        sessions.events.stream(session.id, extra_headers={"Last-Event-ID": before[0].event_id})
    )
    assert [e.event_id for e in before[1:] + after] == [e.event_id for e in whole]
    deltas = [e.delta for e in before + after if e.type == "agent.session.turn.output_text.delta"]
    assert "".join(deltas).startswith("tick0 tick1 tick2")
    assert wait_for(lambda: sessions.retrieve(session.id).status == "idle")
    with pytest.raises(openai.BadRequestError):
        sessions.events.stream(session.id, extra_headers={"Last-Event-ID": "not:an-id"})


def test_a_failing_turn_streams_the_error_and_a_failed_turn(server: Server, tmp_path: Path) -> None:
    client = world.client_for(world.server_url(server), "tenant-fail")
    sessions = client.beta.agents.sessions
    session = sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    events = sessions.events.stream(session.id)
    failing = {"mode": "fail", "message": "model exploded"}
    sessions.events.create(session.id, events=[message("try", scripted=failing)])
    assert world.dispatch_to(world.server_url(server), tmp_path) == 1
    seen = until_idle(events)
    error = next(e for e in seen if e.type == "error")
    assert (error.error.message, error.error.type) == ("model exploded", "server_error")
    failed = next(e for e in seen if e.type == "agent.session.turn.failed")
    assert failed.turn.status == "failed"
    assert (failed.turn.error.code, failed.turn.error.message) == ("server_error", "model exploded")
    assert seen[-1].type == "agent.session.idle"
