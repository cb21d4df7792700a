"""End to end: the reference runner subprocess executes turns on the `codex` profile.

The runner runs outside the network namespace and talks to the live API; the codex it
spawns (with the mock model) runs inside one, as AGENTRUN_CODEX_COMMAND says. Two runs of
one session share a CODEX_HOME, so the second run resumes the first one's thread.
"""

from __future__ import annotations

import time

import pytest

from runs.models import Command, Event, Run
from runs.services.command_lifecycle import create_command
from sessions.models import Session
from tests.builders import make_run
from tests.codex.conftest import Harness, mock_policy
from tests.runner.helpers import start_runner

pytestmark = pytest.mark.django_db(transaction=True)


def run_turn_through_the_runner(live_server, codex: Harness, text: str) -> Run:
    run = make_run(
        backend_profile="codex",
        workspace_ref={"path": str(codex.workspace)},
        execution_policy=mock_policy(),
        session_ref={"session_id": "sess-codex-1", "metadata": {}},
    )
    turn = create_command(run_id=run.id, type="turn", payload={"text": text}).command
    started = time.monotonic()
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    out, _ = runner.communicate(timeout=60)
    print(f"runner on codex: exit {runner.returncode} after {time.monotonic() - started:.2f}s")
    assert runner.returncode == 0, out
    run.refresh_from_db()
    assert run.status == "completed", out
    assert Command.objects.get(pk=turn.pk).state == "completed"
    return run


def messages(run: Run) -> list[str]:
    events = Event.objects.filter(run=run, type="agent_message").order_by("seq")
    return [e.payload["text"] for e in events]


def test_codex_turns_run_through_the_real_runner_and_the_next_run_resumes_the_thread(
    live_server, codex: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTRUN_CODEX_HOME", str(codex.tmp / "codex-home"))
    first = run_turn_through_the_runner(live_server, codex, "hello codex")
    assert messages(first) == ["hello from mock, prompt 1"]
    types = set(Event.objects.filter(run=first).values_list("type", flat=True))
    assert {"agent_message_delta", "agent_message", "token_usage", "backend_status"} <= types
    thread_id = Session.objects.get(pk="sess-codex-1").thread_id
    assert thread_id
    reported = Event.objects.filter(run=first, type="agent_message")
    assert {e.payload["thread_id"] for e in reported} == {thread_id}

    second = run_turn_through_the_runner(live_server, codex, "hello again")
    assert second.session_ref["thread_id"] == thread_id  # handed to the runner
    assert messages(second) == ["hello from mock, prompt 2"]  # the model saw turn one
    statuses = Event.objects.filter(run=second, type="backend_status")
    resumed = [e for e in statuses if e.payload.get("phase") == "thread-resumed"]
    assert [e.payload["thread_id"] for e in resumed] == [thread_id]
    assert Session.objects.get(pk="sess-codex-1").thread_id == thread_id
