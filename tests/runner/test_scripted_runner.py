"""The reference runner as a subprocess, on the scripted backend, against a live API."""

from __future__ import annotations

import time

import pytest

from runs.models import Command, Event, Run
from runs.services.cancellation import cancel_command, cancel_run
from runs.services.command_lifecycle import create_command
from sessions.models import Session
from tests.builders import make_run
from tests.runner.helpers import start_runner

pytestmark = pytest.mark.django_db(transaction=True)


def output_text(run: Run) -> str:
    return " ".join(
        e.payload.get("text", "") for e in Event.objects.filter(run=run, type="agent_message")
    )


def test_a_turn_runs_to_completion_with_the_echo_and_batched_events(live_server) -> None:
    run = make_run(session_ref={"session_id": "sess-runner-1", "metadata": {}})
    turn = create_command(run_id=run.id, type="turn", payload={"text": "hello runner"}).command
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    run.refresh_from_db()
    assert run.status == "completed", out
    assert Command.objects.get(pk=turn.pk).state == "completed"
    assert "Echo: hello runner" in output_text(run)
    types = list(Event.objects.filter(run=run).order_by("seq").values_list("type", flat=True))
    for expected in (
        "agent_message_delta",
        "tool_call",
        "tool_output",
        "agent_message",
        "token_usage",
        "terminal_status",
    ):
        assert expected in types
    session = Session.objects.get(pk="sess-runner-1")
    assert session.thread_id and session.thread_id.startswith("thr_scripted_")
    assert session.execution_state == "terminal" and session.terminal_status == "completed"


def test_a_steer_during_a_long_turn_shows_up_in_its_output(live_server) -> None:
    run = make_run()
    create_command(
        run_id=run.id,
        type="turn",
        payload={"text": "count", "scripted": {"mode": "long", "ticks": 15, "tick_ms": 100}},
    )
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    _wait_for(lambda: Event.objects.filter(run=run, type="agent_message_delta").exists())
    steer = create_command(run_id=run.id, type="steer", payload={"text": "and say blue"}).command
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    assert "[steer] and say blue" in output_text(run)
    assert Command.objects.get(pk=steer.pk).state == "completed"


def test_a_cancel_during_a_long_turn_stops_the_runner_within_two_heartbeats(live_server) -> None:
    run = make_run()
    create_command(run_id=run.id, type="turn", payload={"text": "x", "scripted": {"mode": "hang"}})
    runner = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=3000)
    _wait_for(lambda: Run.objects.get(pk=run.pk).status == "running")
    cancel_run(run_id=run.id, reason="user stop")
    cancelled_at = time.monotonic()
    out, _ = runner.communicate(timeout=30)
    elapsed = time.monotonic() - cancelled_at
    print(f"runner exit {elapsed:.2f}s after cancel (heartbeat interval 1.0s)")
    assert runner.returncode == 3, out
    assert elapsed < 2 * 1.0 + 1.0  # two heartbeat intervals, plus process exit
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def test_a_cancel_with_a_long_lease_stops_the_runner_without_waiting_for_its_heartbeat(
    live_server,
) -> None:
    """Ending a run revokes its key: the turn's command poller gets 401s. It must stop the
    runner at once; polling on (every 250 ms, 20 s until the next heartbeat of a 60 s lease)
    tripped the failed-auth throttle for every runner of the host (found by CI)."""
    run = make_run()
    create_command(run_id=run.id, type="turn", payload={"text": "x", "scripted": {"mode": "hang"}})
    runner = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=60_000)
    _wait_for(lambda: Run.objects.get(pk=run.pk).status == "running")
    cancel_run(run_id=run.id, reason="user stop")
    cancelled_at = time.monotonic()
    out, _ = runner.communicate(timeout=60)
    elapsed = time.monotonic() - cancelled_at
    print(f"runner exit {elapsed:.2f}s after cancel (next heartbeat 20 s away)")
    assert runner.returncode == 3, out
    assert elapsed < 10, out  # well before the heartbeat


def test_a_failing_turn_fails_the_command_and_the_run(live_server) -> None:
    run = make_run()
    create_command(
        run_id=run.id,
        type="turn",
        payload={"text": "x", "scripted": {"mode": "fail", "message": "model exploded"}},
    )
    runner = start_runner(api_url=live_server.url, run_id=run.id)
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    run.refresh_from_db()
    assert (run.status, run.failure_kind, run.failure_message) == (
        "failed",
        "backend-failed",
        "model exploded",
    )


def _wait_for(condition, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_cancelling_only_the_turn_interrupts_it_and_the_runner_goes_on(live_server) -> None:
    run = make_run()
    stuck = create_command(
        run_id=run.id, type="turn", payload={"text": "x", "scripted": {"mode": "hang"}}
    ).command
    after = create_command(run_id=run.id, type="turn", payload={"text": "next one"}).command
    runner = start_runner(api_url=live_server.url, run_id=run.id, lease_ms=30_000)
    _wait_for(lambda: Command.objects.get(pk=stuck.pk).state == "acknowledged")
    cancelled_at = time.monotonic()
    cancel_command(command_id=stuck.id, reason="not this one")
    out, _ = runner.communicate(timeout=60)
    assert runner.returncode == 0, out
    assert time.monotonic() - cancelled_at < 10  # well before a heartbeat (every 10 s)
    assert Command.objects.get(pk=after.pk).state == "completed"
    assert "Echo: next one" in output_text(run)
    assert Run.objects.get(pk=run.pk).status == "completed"
