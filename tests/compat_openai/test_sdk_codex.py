"""The SDK flow once with the real Codex binary (offline: codex and its loopback mock
Responses server in a network namespace, tests/codex): a session on the `codex` profile,
a message, the turn run by the reference runner, and the agent's answer as an item."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.codex.conftest import (  # noqa: F401  (pytest fixtures, used by name)
    Harness,
    _needs_codex_and_netns,
    codex,
    mock_policy,
)
from tests.compat_openai.world import message
from tests.runner.helpers import start_runner

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_turn_on_the_real_codex_through_the_sdk(
    live_server: Any,
    sdk: Any,
    codex: Harness,  # noqa: F811  (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTRUN_CODEX_HOME", str(codex.tmp / "codex-home"))
    sessions = sdk("tenant-codex").beta.agents.sessions
    session = sessions.create(
        environment={"type": "self_hosted", "workspace_directory": str(codex.workspace)},
        agent={"model": "codex"},
        extra_body={"execution_policy": mock_policy()},
    )
    receipt = sessions.events.with_raw_response.create(
        session.id, events=[message("hello codex")]
    ).http_response.json()["events"][0]
    runner = start_runner(
        api_url=live_server.url, run_id=receipt["run_id"], tenant_id="tenant-codex"
    )
    out, _ = runner.communicate(timeout=90)
    assert runner.returncode == 0, out
    turn = sessions.turns.retrieve(receipt["turn_id"], session_id=session.id)
    assert turn.status == "completed", out  # the runner has finished the turn
    items = list(sessions.items.list(session.id, order="asc"))
    assert items[0].role == "user" and items[0].content[0].text == "hello codex"
    answers = [i.content[0].text for i in items if i.type == "message" and i.role == "assistant"]
    assert answers == ["hello from mock, prompt 1"]
    assert turn.usage is not None and turn.usage.total_tokens > 0
    sent = json.dumps(codex.requests()[0])
    assert "hello codex" in sent  # the model got the SDK's message
    assert sessions.retrieve(session.id).status == "idle"
