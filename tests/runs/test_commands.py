"""Commands: per-run seqs, idempotency, the events creation writes, terminal runs."""

from __future__ import annotations

import pytest

from agentrun.errors import AgentRunError
from runs.models import Command, Event
from runs.services.cancellation import cancel_run
from runs.services.command_lifecycle import create_command
from tests.builders import make_run
from tests.runs.threads import race


@pytest.mark.django_db
def test_the_first_turn_writes_user_message_run_created_and_command_created() -> None:
    run = make_run()
    command = create_command(run_id=run.id, type="turn", payload={"text": "fix the bug"}).command
    events = list(Event.objects.filter(run=run).order_by("seq"))
    assert [(e.type, e.payload.get("phase")) for e in events] == [
        ("user_message", None),
        ("backend_status", "run-created"),
        ("backend_status", "command-created"),
    ]
    assert events[0].payload["text"] == "fix the bug"
    assert events[2].payload["command_id"] == command.id
    steer = create_command(run_id=run.id, type="steer", payload={"text": "also tests"}).command
    interrupt = create_command(run_id=run.id, type="interrupt", payload={}).command
    assert (command.seq, steer.seq, interrupt.seq) == (1, 2, 3)
    later = Event.objects.filter(run=run, seq__gt=3).order_by("seq")
    assert [(e.type, e.payload.get("phase")) for e in later] == [
        ("user_message", None),
        ("backend_status", "command-created"),
        ("backend_status", "command-created"),
    ]


@pytest.mark.django_db
def test_an_idempotency_key_replays_the_same_command_and_409s_on_another_payload() -> None:
    run = make_run()
    first = create_command(run_id=run.id, type="turn", payload={"text": "a"}, idempotency_key="k1")
    again = create_command(run_id=run.id, type="turn", payload={"text": "a"}, idempotency_key="k1")
    assert first.created and not again.created and again.command.id == first.command.id
    with pytest.raises(AgentRunError) as mismatch:
        create_command(run_id=run.id, type="turn", payload={"text": "b"}, idempotency_key="k1")
    assert mismatch.value.http_status == 409
    assert Command.objects.filter(run=run).count() == 1


@pytest.mark.django_db
def test_a_command_on_a_terminal_run_is_a_409_but_a_replay_still_answers() -> None:
    run = make_run()
    create_command(run_id=run.id, type="turn", payload={"text": "a"}, idempotency_key="k1")
    cancel_run(run_id=run.id, reason="stop")
    replay = create_command(run_id=run.id, type="turn", payload={"text": "a"}, idempotency_key="k1")
    assert not replay.created
    with pytest.raises(AgentRunError) as terminal:
        create_command(run_id=run.id, type="turn", payload={"text": "new"})
    assert terminal.value.http_status == 409


@pytest.mark.django_db(transaction=True)
def test_concurrent_creates_with_one_key_make_one_command() -> None:
    run = make_run()
    results = race(
        [
            lambda: create_command(
                run_id=run.id, type="turn", payload={"text": "a"}, idempotency_key="same"
            )
            for _ in range(6)
        ]
    )
    assert sum(1 for r in results if r.created) == 1
    assert len({r.command.id for r in results}) == 1
    assert Command.objects.filter(run=run).count() == 1
