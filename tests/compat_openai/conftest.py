"""The real `openai` SDK against the live server (`/openai/v1`), turns run by real runner
subprocesses on the scripted backend."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agentrun.auth import issue_api_key
from dispatch.services.launch import dispatch_batch
from runs.models import TERMINAL_RUN_STATUSES, Run
from tests.runtime.server import Server, serving

openai = pytest.importorskip(
    "openai", reason="the pinned `openai` SDK (requirements-dev.txt) is not installed"
)

ENDED = ("agent.session.turn.completed", "agent.session.turn.failed")
ENVIRONMENT = {"type": "self_hosted", "workspace_directory": "/tmp/agentrun-sdk-workspace"}


@pytest.fixture
def sdk(live_server: Any) -> Callable[..., Any]:
    """A client of the SDK for a new client key of `tenant` (no retries: a test sees the
    first answer)."""

    def make(tenant: str = "tenant-sdk", **options: Any) -> Any:
        key = issue_api_key(tenant_id=tenant, role="client").secret
        return openai.OpenAI(
            api_key=key, base_url=f"{live_server.url}/openai/v1", max_retries=0, **options
        )

    return make


@pytest.fixture
def dispatch(live_server: Any, tmp_path: Path) -> Iterator[Callable[[], int]]:
    """Dispatch the pending turns to runner subprocesses (the local launcher); at the end,
    wait for every run they started to end, so no runner outlives its test."""

    def run() -> int:
        with override_settings(AGENTRUN_API_URL=live_server.url, AGENTRUN_DATA_DIR=tmp_path):
            return dispatch_batch(owner="sdk-test").dispatched

    yield run
    wait_for(lambda: not Run.objects.exclude(status__in=TERMINAL_RUN_STATUSES).exists(), 60)


def wait_for(condition: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def message(text: str, **payload: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
    }
    if payload:
        event["agentrun_payload"] = payload
    return event


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[Server]:
    """The real server (uvicorn, the production command line) on the test database, one
    per module."""
    with django_db_blocker.unblock(), serving() as running:
        yield running


@pytest.fixture
def settled() -> Iterator[None]:
    """At the end of a test, every run it started has ended (no runner outlives it)."""
    yield
    wait_for(lambda: not Run.objects.exclude(status__in=TERMINAL_RUN_STATUSES).exists(), 60)


def server_client(server: Server, tenant: str) -> Any:
    key = issue_api_key(tenant_id=tenant, role="client").secret
    return openai.OpenAI(
        api_key=key, base_url=f"http://127.0.0.1:{server.port}/openai/v1", max_retries=0
    )


def server_dispatch(server: Server, tmp_path: Path) -> int:
    with override_settings(
        AGENTRUN_API_URL=f"http://127.0.0.1:{server.port}", AGENTRUN_DATA_DIR=tmp_path
    ):
        return dispatch_batch(owner="sdk-stream-test").dispatched


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
