"""The `codex` backend against the real `codex app-server` (0.169.0) and a mock model.

Each test drives `CodexBackend` directly, as the runner does, with a TurnControl that
records the events. No database is involved.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from runner.backends.base import TurnInput, TurnOutcome
from runner.backends.codex import CodexBackend
from runner.backends.codex.config import codex_argv, codex_env, toml_value
from tests.codex.conftest import MOCK_PROVIDER_CONFIG, Harness, Recorder


def turn(text: str, thread_id: str | None = None, command_id: str = "cmd-1") -> TurnInput:
    return TurnInput(command_id, text, {"text": text}, thread_id)


def run_one(backend: CodexBackend, text: str, thread_id: str | None = None):
    recorder = Recorder()
    started = time.monotonic()
    outcome = backend.run_turn(turn(text, thread_id), recorder.control)
    print(f"turn {text!r}: {outcome.terminal_status} in {time.monotonic() - started:.2f}s")
    return outcome, recorder


def in_background(backend: CodexBackend, text: str, recorder: Recorder):
    """Run a turn on a thread, as the runner does while its poller feeds steers in."""
    box: dict[str, TurnOutcome] = {}
    worker = threading.Thread(
        target=lambda: box.setdefault("outcome", backend.run_turn(turn(text), recorder.control))
    )
    worker.start()
    return worker, box


def test_a_plain_turn_streams_deltas_then_the_message_and_its_token_usage(codex: Harness):
    backend = CodexBackend(codex.run())
    try:
        outcome, events = run_one(backend, "Say hello.")
    finally:
        backend.close()
    assert outcome.terminal_status == "completed", events.events
    assert outcome.thread_id and outcome.turn_id
    deltas = events.of("agent_message_delta")
    assert "".join(d["delta"] for d in deltas) == "hello from mock, prompt 1"
    assert [m["text"] for m in events.of("agent_message")] == ["hello from mock, prompt 1"]
    (usage,) = events.of("token_usage")
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0
    types = events.types()
    assert types.index("agent_message_delta") < types.index("agent_message")
    assert types.index("agent_message") < types.index("token_usage")
    for type, payload in events.events:  # every event says which thread, turn, command
        assert payload["thread_id"] == outcome.thread_id, type
        assert payload["command_id"] == "cmd-1", type
        if type != "backend_status":
            assert payload["turn_id"] == outcome.turn_id, type
    assert events.status("thread-started")[0]["thread_id"] == outcome.thread_id


def test_a_tool_call_turn_reports_the_call_its_output_and_the_final_reply(codex: Harness):
    backend = CodexBackend(codex.run())
    try:
        outcome, events = run_one(backend, "run: echo hi-from-tool")
    finally:
        backend.close()
    assert outcome.terminal_status == "completed", events.events
    (call,) = events.of("tool_call")
    (output,) = events.of("tool_output")
    assert call["tool"] == "shell" and "echo hi-from-tool" in call["arguments"]["command"]
    assert call["arguments"]["cwd"] == str(codex.workspace)
    assert output["call_id"] == call["call_id"]
    assert output["exit_code"] == 0 and "hi-from-tool" in output["output"]
    assert [m["text"] for m in events.of("agent_message")] == ["tool said: hi-from-tool"]
    types = events.types()
    assert types.index("tool_call") < types.index("tool_output") < types.index("agent_message")
    # The model's second request carried the command's output back.
    assert codex.requests()[-1]["input"][-1]["type"] == "function_call_output"


def test_a_steer_mid_stream_is_acknowledged_and_the_turn_ends_with_the_steered_reply(
    codex: Harness,
):
    backend = CodexBackend(codex.run())
    recorder = Recorder()
    try:
        worker, box = in_background(backend, "tick", recorder)
        recorder.wait_for(lambda t, p: t == "agent_message_delta", timeout_s=15)
        recorder.control.steers.put("steer: now say hi")
        worker.join(timeout=20)
    finally:
        backend.close()
    outcome = box["outcome"]
    assert outcome.terminal_status == "completed", recorder.events
    (ack,) = recorder.status("steer-accepted")
    assert ack["text"] == "steer: now say hi" and ack["turn_id"] == outcome.turn_id
    # The ticking message was cut (it never completes); the reply is the post-steer one.
    assert [m["text"] for m in recorder.of("agent_message")] == ["steered: now say hi"]
    (abandoned,) = recorder.status("items-abandoned")
    assert [i["type"] for i in abandoned["items"]] == ["agentMessage"]
    assert "steer: now say hi" in str(codex.requests()[-1]["input"])


def test_an_interrupt_mid_stream_cancels_the_turn_quickly(codex: Harness):
    backend = CodexBackend(codex.run())
    recorder = Recorder()
    try:
        worker, box = in_background(backend, "tick", recorder)
        recorder.wait_for(lambda t, p: t == "agent_message_delta", timeout_s=15)
        interrupted_at = time.monotonic()
        recorder.control.interrupted.set()
        worker.join(timeout=10)
        elapsed = time.monotonic() - interrupted_at
    finally:
        backend.close()
    print(f"interrupt -> cancelled outcome in {elapsed * 1000:.0f} ms")
    outcome = box["outcome"]
    assert (outcome.terminal_status, outcome.failure_kind) == ("cancelled", "cancelled")
    assert outcome.thread_id and outcome.turn_id
    assert elapsed < 2.0
    assert not recorder.of("agent_message")  # the partial reply never completed


def test_the_thread_is_kept_across_turns_and_resumed_by_the_next_run(
    codex: Harness, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AGENTRUN_CODEX_HOME", str(codex.tmp / "codex-home"))
    first = CodexBackend(codex.run())
    try:
        one, _ = run_one(first, "hello")
        two, events_two = run_one(first, "hello again", thread_id=one.thread_id)
    finally:
        first.close()
    assert one.thread_id == two.thread_id and one.turn_id != two.turn_id
    assert not events_two.status("thread-resumed")  # same process: the thread is loaded
    assert events_two.of("agent_message")[-1]["text"] == "hello from mock, prompt 2"

    second = CodexBackend(codex.run())  # a new run: a new app-server process
    try:
        three, events_three = run_one(second, "and again", thread_id=one.thread_id)
    finally:
        second.close()
    assert three.terminal_status == "completed", events_three.events
    assert three.thread_id == one.thread_id
    assert events_three.status("thread-resumed")[0]["thread_id"] == one.thread_id
    # The model saw the whole history: this is the thread's third prompt.
    assert events_three.of("agent_message")[-1]["text"] == "hello from mock, prompt 3"
    # Only this turn's usage is reported, not the earlier turn's replayed on resume.
    assert len(events_three.of("token_usage")) == 1


@pytest.mark.parametrize("answer", ["accept", "decline"])
def test_an_approval_request_is_answered_by_policy_and_recorded(codex: Harness, answer: str):
    backend = CodexBackend(
        codex.run(approval_policy="on-request", sandbox="workspace-write", approvals=answer)
    )
    try:
        outcome, events = run_one(backend, "escalate: touch escalated.txt")
    finally:
        backend.close()
    assert outcome.terminal_status == "completed", events.events
    (asked,) = events.status("approval-requested")
    (answered,) = events.status("approval-answered")
    assert asked["method"] == answered["method"] == "item/commandExecution/requestApproval"
    assert asked["reason"] == "mock wants to run outside the sandbox"
    assert answered["decision"] == answer
    (output,) = events.of("tool_output")
    created = (codex.workspace / "escalated.txt").exists()
    if answer == "accept":
        assert created and output["exit_code"] == 0 and output["status"] == "completed"
    else:
        assert not created and output["status"] == "declined"
        assert "rejected by user" in events.of("agent_message")[-1]["text"]


def test_a_failing_model_fails_the_turn_with_its_error(codex: Harness):
    backend = CodexBackend(codex.run())
    try:
        outcome, events = run_one(backend, "fail")
    finally:
        backend.close()
    assert (outcome.terminal_status, outcome.failure_kind) == ("failed", "backend-failed")
    assert outcome.failure_message and events.of("error")
    assert outcome.thread_id and outcome.turn_id


def test_a_codex_that_dies_at_start_up_fails_the_turn_as_infra_with_its_stderr(
    codex: Harness, monkeypatch: pytest.MonkeyPatch
):
    # "untrusted" is rejected at start-up by 0.169: app-server exits rc=1 before answering.
    # (An operator's mistake: a client cannot send codex configuration at all.)
    config = {**MOCK_PROVIDER_CONFIG, "approval_policy": "untrusted"}
    monkeypatch.setenv("AGENTRUN_CODEX_CONFIG", json.dumps(config))
    backend = CodexBackend(codex.run())
    started = time.monotonic()
    try:
        outcome, events = run_one(backend, "hello")
    finally:
        backend.close()
    assert (outcome.terminal_status, outcome.failure_kind) == ("failed", "infra-failed")
    assert "rc=1" in outcome.failure_message and "untrusted" in outcome.failure_message
    assert events.of("error")
    assert time.monotonic() - started < 10


def test_close_leaves_no_process_and_no_temp_dir_behind(codex: Harness):
    backend = CodexBackend(codex.run())
    outcome, _ = run_one(backend, "hello")
    workdir = backend._workdir
    process = backend._process
    assert outcome.terminal_status == "completed" and workdir and process
    started = time.monotonic()
    backend.close()
    print(f"close took {time.monotonic() - started:.2f}s (rc={process.proc.returncode})")
    assert process.proc.returncode == 0  # it exited by itself once stdin closed
    assert not Path(workdir).exists()


def test_codex_gets_neither_the_runner_credentials_nor_host_model_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    for name in ("AGENTRUN_RUNNER_KEY", "OPENAI_API_KEY", "CODEX_HOME", "https_proxy"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/x")
    monkeypatch.setenv("PROVIDER_KEY", "sk-for-codex")
    monkeypatch.setenv("AGENTRUN_CODEX_ENV_PASSTHROUGH", "PROVIDER_KEY")
    env = codex_env(str(tmp_path / "home"), str(tmp_path))
    assert env["CODEX_HOME"] == str(tmp_path / "home")
    assert "leak" not in env.values() and "DATABASE_URL" not in env
    assert env["TMPDIR"] == str(tmp_path / "tmp")
    assert env["PROVIDER_KEY"] == "sk-for-codex"  # the operator let this one through


def test_the_operator_config_becomes_codex_config_flags(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AGENTRUN_CODEX_COMMAND", '["codex-x", "app-server"]')
    operator = {"model_providers": {"p": {"base_url": "http://h/v1"}}, "features.plugins": True}
    monkeypatch.setenv("AGENTRUN_CODEX_CONFIG", json.dumps(operator))
    argv = codex_argv()
    flags = [argv[i + 1] for i, part in enumerate(argv) if part == "-c"]
    assert argv[:2] == ["codex-x", "app-server"]
    assert 'model_providers.p.base_url="http://h/v1"' in flags
    # Forced last, whatever the operator wrote: no start-up network traffic.
    assert flags[-2:] == ["features.plugins=false", "check_for_update_on_startup=false"]
    assert toml_value({"granular": {"rules": True}}) == '{"granular" = {"rules" = true}}'
