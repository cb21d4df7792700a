"""`manage.py agentrun_cli`: a person drives a session from a terminal over HTTP."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from agentrun.auth import issue_api_key
from dispatch.services.launch import dispatch_batch

pytestmark = pytest.mark.django_db(transaction=True)


def cli(live_server: Any, key: str, *args: str) -> str:
    out = io.StringIO()
    call_command("agentrun_cli", *args, "--api-url", live_server.url, "--key", key, stdout=out)
    return out.getvalue()


def test_turn_then_tail_prints_the_agents_answer(live_server: Any, tmp_path: Path) -> None:
    key = issue_api_key(tenant_id="cli-tenant", role="client").secret
    filed = cli(live_server, key, "turn", "cli-1", "hello from the terminal")
    assert filed.startswith("created: run run_")
    with override_settings(AGENTRUN_API_URL=live_server.url, AGENTRUN_DATA_DIR=tmp_path):
        assert dispatch_batch(owner="cli-test").dispatched == 1
    tail = cli(live_server, key, "tail", "cli-1")
    assert "user_message: hello from the terminal" in tail
    assert "agent_message: Echo: hello from the terminal" in tail
    assert tail.rstrip().endswith("terminal_status: completed")
    nothing = cli(live_server, key, "cancel", "cli-1")
    assert '"changed": false' in nothing
