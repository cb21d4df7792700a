"""Turns through the real `openai` SDK on the scripted backend, run by real runner
subprocesses: a message starts a turn, a second one while it runs steers it, a cancel
stops it, one `Idempotency-Key` makes one turn; turns and items match agentrun's own API."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from runs.models import Command, Event
from tests.builders import key_client
from tests.compat_openai.world import ENVIRONMENT, message, openai
from tests.runtime.server import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _new_session(client: Any) -> Any:
    return client.beta.agents.sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})


def _ended(client: Any, session_id: str, turn_id: str) -> Any:
    turn = client.beta.agents.sessions.turns.retrieve(turn_id, session_id=session_id)
    return turn if turn.status in ("completed", "failed", "cancelled") else None


def test_a_message_runs_a_turn_and_turns_and_items_match_agentruns_api(
    sdk: Any, dispatch: Any
) -> None:
    client = sdk("tenant-turns")
    session = _new_session(client)
    sessions = client.beta.agents.sessions
    receipt = sessions.events.with_raw_response.create(
        session.id, events=[message("hello sdk")], idempotency_key="first-message"
    )
    assert receipt.status_code == 202
    [done] = receipt.http_response.json()["events"]
    assert done["disposition"] == "created"
    assert sessions.retrieve(session.id).status == "in_progress"
    assert dispatch() == 1
    turn = wait_for(lambda: _ended(client, session.id, done["turn_id"]), within_s=60)
    assert turn.status == "completed" and turn.object == "agent.session.turn"
    assert turn.usage is not None and turn.usage.total_tokens > 0
    assert wait_for(lambda: sessions.retrieve(session.id).status == "idle")

    # The same request again (a client retry): the same turn, no second one.
    again = sessions.events.with_raw_response.create(
        session.id, events=[message("hello sdk")], idempotency_key="first-message"
    )
    assert again.http_response.json()["events"][0] == {**done, "disposition": "replayed"}
    turns = sessions.turns.list(session.id).data
    assert [t.id for t in turns] == [done["turn_id"]]
    assert Command.objects.filter(run__session_ref__session_id=session.id).count() == 1

    # The items are the session's output, as agentrun's own API shows it.
    items = list(sessions.items.list(session.id, order="asc"))
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "user"),
        ("mcp_call", None),  # the scripted backend's echo tool
        ("message", "assistant"),
    ]
    assert items[0].content[0].text == "hello sdk"
    assert items[1].name == "echo" and items[1].status == "completed"
    assert items[1].output == "hello sdk"
    assert items[2].content[0].text == "Echo: hello sdk"
    assert all(i.turn_id == turn.id for i in items)
    own = key_client(role="client", tenant_id="tenant-turns")
    output = own.get(f"/api/v1/sessions/{session.id}/output").json()["items"]
    opened = [e for e in output if e["type"] in ("user_message", "tool_call", "agent_message")]
    assert [i.id for i in items] == [e["id"] for e in opened]
    assert own.get(f"/api/v1/commands/{turn.id}").json()["state"] == "completed"
    by_turn = sessions.turns.items.list(turn.id, session_id=session.id, order="asc")
    assert [i.id for i in by_turn] == [i.id for i in items]
    newest_first = [i.id for i in sessions.items.list(session.id, limit=1)]
    assert newest_first == [i.id for i in reversed(items)]  # paged by `after`, one at a time


def test_a_message_while_a_turn_runs_steers_it(sdk: Any, dispatch: Any) -> None:
    client = sdk("tenant-steer")
    session = _new_session(client)
    sessions = client.beta.agents.sessions
    long = {"scripted": {"mode": "long", "ticks": 30, "tick_ms": 100}}
    first = sessions.events.with_raw_response.create(
        session.id, events=[message("count", **long)]
    ).http_response.json()["events"][0]
    assert dispatch() == 1
    run_id = first["run_id"]
    wait_for(lambda: Event.objects.filter(run_id=run_id, type="agent_message_delta").exists())
    second = sessions.events.with_raw_response.create(
        session.id, events=[message("and say blue")]
    ).http_response.json()["events"][0]
    assert (second["disposition"], second["turn_id"]) == ("steered", first["turn_id"])
    turn = wait_for(lambda: _ended(client, session.id, first["turn_id"]), within_s=60)
    assert turn.status == "completed"
    assert [t.id for t in sessions.turns.list(session.id)] == [first["turn_id"]]
    items = list(sessions.items.list(session.id, order="asc"))
    users = [i.content[0].text for i in items if i.type == "message" and i.role == "user"]
    assert users == ["count", "and say blue"]
    answer = [i for i in items if i.type == "message" and i.role == "assistant"][-1]
    assert "[steer] and say blue" in answer.content[0].text


def test_a_cancel_event_cancels_the_active_turn_with_a_receipt(sdk: Any, dispatch: Any) -> None:
    client = sdk("tenant-cancel")
    session = _new_session(client)
    sessions = client.beta.agents.sessions
    nothing = sessions.events.with_raw_response.create(
        session.id, events=[{"type": "agent.session.input.cancel"}]
    ).http_response.json()["events"][0]
    assert nothing["disposition"] == "nothing_to_cancel"
    started = sessions.events.with_raw_response.create(
        session.id, events=[message("wait", scripted={"mode": "hang"})]
    ).http_response.json()["events"][0]
    assert dispatch() == 1
    turn_id = started["turn_id"]
    wait_for(
        lambda: sessions.turns.retrieve(turn_id, session_id=session.id).status == "in_progress"
    )
    cancelled = sessions.events.with_raw_response.create(
        session.id, events=[{"type": "agent.session.input.cancel"}]
    ).http_response.json()["events"][0]
    assert cancelled["disposition"] == "cancelled"
    assert cancelled["cancel_request_id"].startswith("cancel_")
    turn = wait_for(lambda: _ended(client, session.id, started["turn_id"]), within_s=30)
    assert turn.status == "cancelled"
    assert wait_for(lambda: sessions.retrieve(session.id).status == "idle")
    # Deleting is refused only while a turn is active; now it is not.
    assert sessions.delete(session.id).deleted is True


def test_delete_while_a_turn_is_active_is_the_sdks_conflict_error(sdk: Any) -> None:
    client = sdk("tenant-busy")
    session = _new_session(client)
    client.beta.agents.sessions.events.create(session.id, events=[message("queued")])
    with pytest.raises(openai.ConflictError) as raised:
        client.beta.agents.sessions.delete(session.id)
    assert raised.value.code == "session_busy"
    assert raised.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.ConflictError) as reused:  # one key, another message
        for text in ("one", "two"):
            client.beta.agents.sessions.events.create(
                session.id, events=[message(text)], idempotency_key="reused-key"
            )
    assert reused.value.code == "idempotency_mismatch"


def test_one_idempotency_key_sent_by_racing_clients_makes_one_turn(sdk: Any) -> None:
    client = sdk("tenant-race")
    session = _new_session(client)
    barrier = threading.Barrier(4)

    def submit(_: int) -> dict[str, Any]:
        mine = sdk("tenant-race")  # its own key and connection
        barrier.wait()
        answer = mine.beta.agents.sessions.events.with_raw_response.create(
            session.id, events=[message("once")], idempotency_key="raced-key"
        )
        return answer.http_response.json()["events"][0]

    with ThreadPoolExecutor(4) as pool:
        receipts = list(pool.map(submit, range(4)))
    assert len({r["turn_id"] for r in receipts}) == 1
    assert sorted(r["disposition"] for r in receipts) == ["created", *["replayed"] * 3]
    assert Command.objects.filter(run__session_ref__session_id=session.id).count() == 1
