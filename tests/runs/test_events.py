"""Appending events: gap-free seqs under races, redaction, late-write fencing."""

from __future__ import annotations

import pytest

from agentrun.errors import AgentRunError
from runs.models import Event, Run
from runs.selectors import count_events, events_for_command, events_page
from runs.services.cancellation import cancel_run
from runs.services.command_lifecycle import create_command
from runs.services.event_log import NewEvent, append_runner_events
from tests.builders import make_claimed_run
from tests.runs.threads import race


def append(run: Run, *events: NewEvent, runner_id: str = "runner-1", epoch: int = 1) -> list[Event]:
    return append_runner_events(
        run_id=run.id, runner_id=runner_id, lease_epoch=epoch, events=list(events)
    )


@pytest.mark.django_db(transaction=True)
def test_eight_threads_appending_200_events_each_get_seqs_1_to_1600() -> None:
    run = make_claimed_run()
    base = Event.objects.filter(run=run).count()  # run-claimed

    def writer(thread: int) -> int:
        for index in range(200):
            append(run, NewEvent("log", {"thread": thread, "index": index}))
        return thread

    results = race([lambda t=t: writer(t) for t in range(8)])
    assert results == list(range(8)), results
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, base + 1601))
    logs = Event.objects.filter(run=run, type="log")
    assert logs.count() == 1600
    per_thread = {}
    for payload in logs.order_by("seq").values_list("payload", flat=True):
        per_thread.setdefault(payload["thread"], []).append(payload["index"])
    # each writer's own events keep their order
    assert all(indexes == list(range(200)) for indexes in per_thread.values())


@pytest.mark.django_db
def test_a_batch_appends_consecutive_seqs_in_order() -> None:
    run = make_claimed_run()
    appended = append(
        run,
        NewEvent("agent_message_delta", {"delta": "a"}),
        NewEvent("agent_message_delta", {"delta": "b"}),
        NewEvent("agent_message", {"text": "ab"}),
    )
    assert [e.seq for e in appended] == [2, 3, 4]
    assert [e.type for e in events_page(run=run, after_seq=1, limit=10)] == [
        "agent_message_delta",
        "agent_message_delta",
        "agent_message",
    ]
    assert count_events(run=run, after_seq=2) == 2


@pytest.mark.django_db
def test_secrets_in_payloads_are_redacted_before_they_are_stored() -> None:
    run = make_claimed_run()
    append(
        run,
        NewEvent(
            "tool_call",
            {
                "command": "curl -H 'Authorization: Bearer abcdefghijklmnop1234'",
                "env": {"OPENAI_API_KEY": "sk-live-secret-value-123456", "HOME": "/root"},
                "token_usage": {"input_tokens": 3},
            },
        ),
    )
    stored = Event.objects.get(run=run, type="tool_call").payload
    assert "abcdefghijklmnop1234" not in str(stored)
    assert stored["env"] == {"OPENAI_API_KEY": "[redacted]", "HOME": "/root"}
    assert stored["token_usage"] == {"input_tokens": 3}


@pytest.mark.django_db
def test_output_after_cancel_is_kept_as_late_write_rejected_not_as_output() -> None:
    run = make_claimed_run(runner_id="r1")
    cancel_run(run_id=run.id, reason="user stop")
    [stored] = append(run, NewEvent("agent_message", {"text": "too late"}), runner_id="r1")
    assert stored.type == "backend_status"
    assert stored.payload["phase"] == "late-write-rejected"
    assert stored.payload["rejected_type"] == "agent_message"
    assert not Event.objects.filter(run=run, type="agent_message").exists()


@pytest.mark.django_db
def test_a_stale_runner_batch_writes_nothing_but_the_refusal_record() -> None:
    run = make_claimed_run(runner_id="r1")
    before = Event.objects.filter(run=run).count()
    with pytest.raises(AgentRunError) as refused:
        append(run, NewEvent("log", {"line": "x"}), NewEvent("log", {"line": "y"}), runner_id="r2")
    assert refused.value.code == "stale_lease"
    added = list(Event.objects.filter(run=run).order_by("seq")[before:])
    assert [(e.type, e.payload["phase"]) for e in added] == [
        ("backend_status", "late-write-rejected")
    ]
    assert added[0].payload["rejected_types"] == ["log", "log"]


@pytest.mark.django_db
def test_events_for_a_command_include_its_events_and_the_run_terminal_status() -> None:
    run = make_claimed_run()
    first = create_command(run_id=run.id, type="turn", payload={"text": "one"}).command
    second = create_command(run_id=run.id, type="turn", payload={"text": "two"}).command
    cancel_run(run_id=run.id, reason="stop")
    mine = events_for_command(run=run, command_id=first.id, limit=100)
    assert mine and all(
        e.payload.get("command_id") == first.id or e.type == "terminal_status" for e in mine
    )
    assert not any(e.payload.get("command_id") == second.id for e in mine)
    assert any(e.type == "terminal_status" for e in mine)
