"""Bounded cost per request, as a hostile client spends it: a body nested hundreds of
levels deep (an HTML 500 before, from a stack overflow past the parser) is a 400 in the
envelope and writes nothing."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from agentrun import throttle
from agentrun.parsers import MAX_JSON_DEPTH
from runs.models import Event, Run
from tests.api.helpers import API, claimed_run_with_command, fencing, run_body
from tests.builders import key_client

pytestmark = pytest.mark.django_db


def _nested_text(depth: int) -> str:
    """A body nested `depth` levels, written out (`json.dumps` itself recurses)."""
    return '{"x": ' + "[" * depth + "]" * depth + "}"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = {"a": value} if level % 2 else [value]
    return value


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 600, 900, 20_000])
def test_a_deeply_nested_body_is_a_400_envelope(depth: int) -> None:
    policy = _nested_text(depth)
    body = json.dumps(run_body(execution_policy={})).replace(
        '"execution_policy": {}', f'"execution_policy": {policy}'
    )
    response = key_client(role="client").generic(
        "POST", f"{API}/runs", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:200]
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "invalid" and "nests deeper" in error["message"]
    assert not Run.objects.exists()


def test_a_deeply_nested_event_batch_is_a_400_and_writes_nothing() -> None:
    run, _, runner = claimed_run_with_command()
    before = Event.objects.filter(run=run).count()
    body = json.dumps({**fencing(run), "type": "log", "payload": {"x": _nested(800)}})
    response = runner.generic(
        "POST", f"{API}/runs/{run.id}/events", body, content_type="application/json"
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid"
    assert Event.objects.filter(run=run).count() == before


def test_a_body_within_the_depth_limit_is_accepted() -> None:
    # run_body nests 3 levels around the metadata value: the whole body is at the limit.
    body = run_body(
        session_ref={"session_id": "s-depth", "metadata": {"x": _nested(MAX_JSON_DEPTH - 3)}}
    )
    response = key_client(role="client").post(f"{API}/runs", body, format="json")
    assert response.status_code == 201, response.content[:300]


@pytest.fixture
def one_throttle_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The throttle's clock held in the middle of one window. Its windows are fixed (they
    end every 60 s of wall time), so a test whose guesses and checks straddled an end saw
    the count start again: a failure on a slow machine, where 20 password hashes take
    seconds."""
    window = throttle.KEY_FAILURE_WINDOW_S
    middle = (int(time.time() // window) + 0.5) * window
    monkeypatch.setattr(throttle, "time", SimpleNamespace(time=lambda: middle))


@pytest.mark.usefixtures("one_throttle_window")
def test_guessing_api_keys_from_one_address_is_throttled_with_retry_after() -> None:
    from agentrun.throttle import MAX_KEY_FAILURES
    from tests.builders import api_client

    guesser = api_client("ar_client_" + "x" * 40)
    for _ in range(MAX_KEY_FAILURES):
        assert guesser.get(f"{API}/runs").status_code == 401
    refused = guesser.get(f"{API}/runs")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 60
    # Meanwhile a right key from that address cannot confirm a guess either; another
    # address is not held up.
    right = key_client(role="client")
    assert right.get(f"{API}/runs").status_code == 429
    assert right.get(f"{API}/runs", REMOTE_ADDR="10.0.0.9").status_code == 200


@pytest.mark.usefixtures("one_throttle_window")
def test_guessing_admin_passwords_is_throttled_even_for_the_right_one() -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from agentrun.throttle import MAX_KEY_FAILURES

    User.objects.create_superuser("root", "root@example.com", "right-password-1")
    browser = Client()

    def login(password: str, address: str = "127.0.0.1") -> bool:
        browser.post(
            "/admin/login/",
            {"username": "root", "password": password, "next": "/admin/"},
            REMOTE_ADDR=address,
        )
        return "_auth_user_id" in browser.session

    for attempt in range(MAX_KEY_FAILURES):
        assert not login(f"guess-{attempt}")
    assert not login("right-password-1")  # the guesser cannot confirm a hit
    refused = browser.post("/admin/login/", {"username": "root", "password": "x"})
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    assert login("right-password-1", address="10.0.0.9")
