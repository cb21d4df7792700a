"""What the SDK tests share: the pinned `openai` package (or a printed skip), the session
environment, SDK input events, and the real server's client, dispatch and stream reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agentrun.auth import issue_api_key
from dispatch.services.launch import dispatch_batch
from tests.runtime.server import Server

openai = pytest.importorskip(
    "openai", reason="the pinned `openai` SDK (requirements-dev.txt) is not installed"
)

ENDED = ("agent.session.turn.completed", "agent.session.turn.failed")
ENVIRONMENT = {"type": "self_hosted", "workspace_directory": "/tmp/agentrun-sdk-workspace"}


def message(text: str, **payload: Any) -> dict[str, Any]:
    """A user message input event; `payload`: agentrun's `agentrun_payload` extension."""
    event: dict[str, Any] = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
    }
    if payload:
        event["agentrun_payload"] = payload
    return event


def client_for(base_url: str, tenant: str, **options: Any) -> Any:
    """The SDK for a new client key of `tenant`; no retries: a test sees the first answer."""
    key = issue_api_key(tenant_id=tenant, role="client").secret
    return openai.OpenAI(api_key=key, base_url=f"{base_url}/openai/v1", max_retries=0, **options)


def dispatch_to(api_url: str, data_dir: Path) -> int:
    """Dispatch the pending turns to runner subprocesses (the local launcher) of `api_url`."""
    with override_settings(AGENTRUN_API_URL=api_url, AGENTRUN_DATA_DIR=data_dir):
        return dispatch_batch(owner="sdk-test").dispatched


def server_url(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}"


def until_idle(events: Any, *, stop_after: int | None = None) -> list[Any]:
    """Events until the session goes idle after its turn ended (or `stop_after` of them)."""
    seen: list[Any] = []
    turn_ended = False
    for event in events:
        seen.append(event)
        turn_ended = turn_ended or event.type in ENDED
        if (turn_ended and event.type == "agent.session.idle") or len(seen) == stop_after:
            break
    events.close()
    return seen
