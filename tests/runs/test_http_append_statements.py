"""Statements per runner append over HTTP, pinned (bench cell 2 measures the same route).

`POST /runs/{id}/events` with a runner key makes the service's statements and nothing
else: BEGIN, the run lock (which checks the key in the same statement,
`runs.locks.lock_run_for_append`), the event statement, and the COMMIT with the NOTIFY
after it in one string (Django then logs its own COMMIT, which sends nothing:
`tests/runs/test_append_statements.py`). Before issue 18's fourth round the key was looked
up first, on its own (six). No key is
cached anywhere, so a revoked, expired or foreign key is refused on the very next request
(SECURITY.md), with nothing written; and what the lookup refused first (a 401 or 429
before a bad body's 400, a 404 for another run) is still answered first. Other keys
(an operator speaking the runner protocol) take the ordinary lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.client import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.response import Response
from rest_framework.test import APIClient

from agentrun import throttle
from agentrun.models import ApiKey
from runs.models import Event, Run
from tests.api.helpers import API, error_of, fencing, revoke, runner_for
from tests.builders import key_client, key_of, make_claimed_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_throttle_state() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def post(client: APIClient, run: Run, body: dict[str, Any] | None = None) -> Response:
    data = body if body is not None else {**fencing(run), "type": "log", "payload": {"n": 1}}
    response: Response = client.post(f"{API}/runs/{run.id}/events", data, format="json")
    return response


def statements(client: APIClient, run: Run, body: dict[str, Any] | None = None) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert post(client, run, body).status_code == 201
    return [query["sql"] for query in captured.captured_queries]


def events(run: Run) -> int:
    return Event.objects.filter(run=run).count()


@pytest.mark.parametrize("batch", [1, 100])
def test_a_runner_key_append_is_the_services_three_round_trips(batch: int) -> None:
    run = make_claimed_run()
    body: dict[str, Any] = {**fencing(run), "type": "log", "payload": {"n": 0}}
    if batch > 1:
        body = {
            **fencing(run),
            "events": [{"type": "log", "payload": {"n": n}} for n in range(batch)],
        }
    client = runner_for(run)
    connection.close()  # a new connection: the first two appends prepare (test_append_statements)
    for _ in range(2):
        assert post(client, run, body).status_code == 201
    sqls = statements(client, run, body)
    assert len(sqls) == 5, sqls
    assert sqls[0] == "BEGIN" and sqls[4] == "COMMIT", sqls  # Django's log; not sent
    assert sqls[1].startswith("BEGIN;\nEXECUTE run_lock_for_key_"), sqls
    assert "\nEXECUTE append_events_" in sqls[2] and sqls[3].startswith("COMMIT;\n"), sqls
    assert sqls[3].startswith("COMMIT;\nEXECUTE run_change_notify_"), sqls  # prepared too
    assert not any(sql.startswith('SELECT "agentrun_api_keys"') for sql in sqls), sqls


def test_an_operator_key_append_looks_its_key_up_first() -> None:
    run = make_claimed_run()
    sqls = statements(key_client(role="operator"), run)
    assert len(sqls) == 7, sqls  # the key, the run's scope read, then the service's five
    assert sqls[0].startswith('SELECT "agentrun_api_keys"'), sqls


def test_a_key_revoked_between_two_appends_is_401_on_the_next_with_nothing_written() -> None:
    run = make_claimed_run()
    client = runner_for(run)
    assert post(client, run).status_code == 201
    revoke(key_of(client))
    before = events(run)
    assert error_of(post(client, run), 401)["code"] == "unauthorized"
    assert events(run) == before


def test_an_expired_runner_key_is_401_with_nothing_written() -> None:
    run = make_claimed_run()
    client = runner_for(run)
    ApiKey.objects.filter(pk=key_of(client).pk).update(expires_at=timezone.now() - timedelta(1))
    before = events(run)
    assert error_of(post(client, run), 401)["code"] == "unauthorized"
    assert events(run) == before


def test_an_unknown_key_with_the_runner_prefix_is_401() -> None:
    run = make_claimed_run()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer ar_runner_not-a-key")
    assert error_of(post(client, run), 401)["code"] == "unauthorized"


def test_a_runner_key_of_another_run_is_404_with_nothing_written() -> None:
    run, other = make_claimed_run(), make_claimed_run()
    before = events(other)
    assert error_of(post(runner_for(run), other, {**fencing(other), "type": "log"}), 404)
    assert events(other) == before


def test_a_runner_key_of_a_missing_run_is_404() -> None:
    run = make_claimed_run()
    client = key_client(role="runner", tenant_id=run.tenant_id, run_id="run-missing")
    body = {**fencing(run), "type": "log", "payload": {}}
    response = client.post(f"{API}/runs/run-missing/events", body, format="json")
    assert error_of(response, 404)["code"] == "not_found"


def test_a_bad_body_is_401_with_a_revoked_key_and_400_with_a_live_one() -> None:
    run = make_claimed_run()
    client = runner_for(run)
    bad = {**fencing(run), "type": "no-such-type"}
    assert error_of(post(client, run, bad), 400)
    assert error_of(post(runner_for(make_claimed_run()), run, bad), 404)
    revoke(key_of(client))
    assert error_of(post(client, run, bad), 401)["code"] == "unauthorized"


def test_a_throttled_address_is_429_even_with_the_right_runner_key() -> None:
    run = make_claimed_run()
    request = RequestFactory().post("/", REMOTE_ADDR="127.0.0.1")
    for _ in range(throttle.MAX_KEY_FAILURES):
        throttle.record_key_failure(request)
    assert error_of(post(runner_for(run), run), 429)


def test_a_stale_lease_is_still_the_services_409_and_is_recorded() -> None:
    run = make_claimed_run()
    before = events(run)
    body = {"runner_id": "runner-1", "lease_epoch": run.lease_epoch + 1, "type": "log"}
    assert error_of(post(runner_for(run), run, body), 409)["code"] == "stale_lease"
    assert events(run) == before + 1  # the refusal, recorded as late-write-rejected
