"""Trace pages hold every event of a session's run; output pages only what a person reads."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.models import Event
from runs.services.event_log import NewEvent, append_runner_events
from sessions.selectors import OUTPUT_EVENT_TYPES
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.sessions.helpers import admit
from tests.sessions.world import API, claim, finish_turn, finish_whole_run

pytestmark = pytest.mark.django_db

RUNNER_EVENTS = [
    ("backend_status", {"phase": "thread-started"}),
    ("reasoning", {"text": "thinking"}),
    ("agent_message_delta", {"delta": "Hel"}),
    ("agent_message", {"text": "Hello"}),
    ("tool_call", {"name": "shell", "args": ["ls"]}),
    ("log", {"line": "runner log"}),
    ("tool_output", {"output": "a.txt"}),
    ("token_usage", {"input": 10, "output": 3}),
    ("file_change", {"path": "a.txt"}),
    ("error", {"message": "flaky tool"}),
]


def _session_with_a_worked_turn(session_id: str) -> str:
    turn = admit(session_id, "list the files")
    run = claim(turn.run.id)
    append_runner_events(
        run_id=run.id,
        runner_id="runner-1",
        lease_epoch=run.lease_epoch,
        events=[NewEvent(type, payload) for type, payload in RUNNER_EVENTS],
    )
    finish_turn(run, turn.command.id)
    return run.id


def _walk(api: APIClient, path: str, limit: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = 0
    while True:
        response = api.get(f"{path}?after_seq={after}&limit={limit}")
        assert response.status_code == 200, response.json()
        page = response.json()
        assert page["count"] == len(page["items"]) <= limit
        if not page["items"]:
            assert page["next_after_seq"] == after
            return items
        assert all(item["seq"] > after for item in page["items"])
        assert page["next_after_seq"] == page["items"][-1]["seq"]
        items += page["items"]
        after = page["next_after_seq"]


def test_output_pages_hold_only_output_events_and_page_by_after_seq() -> None:
    run_id = _session_with_a_worked_turn("s-output")
    output = _walk(key_client(role="client"), f"{API}/sessions/s-output/output", limit=2)
    expected = list(
        Event.objects.filter(run_id=run_id, type__in=OUTPUT_EVENT_TYPES)
        .order_by("seq")
        .values_list("seq", "type")
    )
    assert [(item["seq"], item["type"]) for item in output] == expected
    assert {item["type"] for item in output} == {
        "user_message",
        "agent_message",
        "tool_call",
        "tool_output",
        "file_change",
        "error",
    }
    assert {item["run_id"] for item in output} == {run_id}


def test_trace_pages_hold_every_event_and_page_by_after_seq() -> None:
    run_id = _session_with_a_worked_turn("s-trace")
    trace = _walk(key_client(role="client"), f"{API}/sessions/s-trace/trace", limit=3)
    seqs = list(Event.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))
    assert [item["seq"] for item in trace] == seqs == list(range(1, len(seqs) + 1))
    types = {item["type"] for item in trace}
    assert {"backend_status", "reasoning", "agent_message_delta", "log", "token_usage"} <= types


def test_a_finished_run_shows_its_terminal_status_in_the_output() -> None:
    turn = admit("s-terminal-out", "go")
    run = claim(turn.run.id)
    finish_turn(run, turn.command.id)
    finish_whole_run(run)
    output = _walk(key_client(role="client"), f"{API}/sessions/s-terminal-out/output", limit=50)
    assert output[-1]["type"] == "terminal_status"


def test_the_trace_of_an_older_run_is_asked_for_by_run_id() -> None:
    old_run_id = _session_with_a_worked_turn("s-two-runs")
    new = admit("s-two-runs", "second turn")
    api = key_client(role="client")
    current = api.get(f"{API}/sessions/s-two-runs/trace").json()
    assert current["run_id"] == new.run.id
    older = api.get(f"{API}/sessions/s-two-runs/trace?run_id={old_run_id}").json()
    assert older["run_id"] == old_run_id
    assert {item["run_id"] for item in older["items"]} == {old_run_id}


def test_a_run_of_another_session_is_not_found_in_this_trace() -> None:
    other = admit("s-elsewhere", "x")
    admit("s-here", "y")
    response = key_client(role="client").get(f"{API}/sessions/s-here/trace?run_id={other.run.id}")
    assert error_of(response, 404)["details"] == {"kind": "run", "id": other.run.id}


def test_another_tenants_output_is_not_found() -> None:
    admit("s-theirs", "secret", tenant_id="tenant-b")
    response = key_client(role="client").get(f"{API}/sessions/s-theirs/output")
    assert error_of(response, 404)["code"] == "not_found"


def test_a_negative_after_seq_is_a_400_naming_it() -> None:
    admit("s-bad-seq", "x")
    response = key_client(role="client").get(f"{API}/sessions/s-bad-seq/trace?after_seq=-1")
    assert error_of(response, 400)["details"]["field"] == "after_seq"
