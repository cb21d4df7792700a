"""`python -m runner turn|steer|cancel|tail`: a person drives a session from a terminal."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import override_settings

from agentrun.auth import issue_api_key
from dispatch.services.launch import dispatch_batch
from runner.cli import main
from tests.runtime.server import serving


def cli(live_server: Any, key: str, *args: str) -> str:
    out = io.StringIO()
    assert main([*args, "--api-url", live_server.url, "--key", key], out=out) == 0
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_turn_then_tail_prints_the_agents_answer(tmp_path: Path) -> None:
    key = issue_api_key(tenant_id="cli-tenant", role="client").secret
    # The tail reads a stream: the real (ASGI) server, not the test's WSGI live server.
    with serving() as server:
        live_server = SimpleNamespace(url=f"http://127.0.0.1:{server.port}")
        filed = cli(live_server, key, "turn", "cli-1", "hello from the terminal")
        assert filed.startswith("created: run run_")
        with override_settings(AGENTRUN_API_URL=live_server.url, AGENTRUN_DATA_DIR=tmp_path):
            assert dispatch_batch(owner="cli-test").dispatched == 1
        tail = cli(live_server, key, "tail", "cli-1")
        nothing = cli(live_server, key, "cancel", "cli-1")
    assert "user_message: hello from the terminal" in tail
    assert "agent_message: Echo: hello from the terminal" in tail
    assert tail.rstrip().endswith("terminal_status: completed")
    assert '"changed": false' in nothing


def test_a_missing_key_or_url_exits_1_and_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("AGENTRUN_API_KEY", "AGENTRUN_API_URL", "AGENTRUN_RUNNER_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert main(["tail", "s-1"]) == 1
    assert "set AGENTRUN_API_KEY" in capsys.readouterr().err
    assert main(["run", "--run", "run_1"]) == 1
    assert "set AGENTRUN_API_URL and AGENTRUN_RUNNER_KEY" in capsys.readouterr().err


@pytest.mark.django_db(transaction=True)
def test_an_api_error_exits_1_with_its_code(
    live_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", "s-1", "--api-url", live_server.url, "--key", "not-a-key"]) == 1
    assert "401" in capsys.readouterr().err
