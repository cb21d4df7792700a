"""Bench cell 2's DRF floor is the real runner append less the service, and nothing else.

The same request (body and runner key) to `POST /api/v1/runs/{id}/events` and to the
floor (`bench.http_floor.FloorRunViewSet` under `bench.http_urls`): both answer 201 with
items of the same fields and about the same size, and the floor runs no statement and
writes nothing; what the real route refuses before the service (a bad body, an unknown
key), the floor refuses the same way. So the cell's floor prices exactly the HTTP stack.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from rest_framework.test import APIClient

from runs.models import Event, Run
from tests.api.helpers import API, fencing, runner_for
from tests.builders import api_client, make_claimed_run

pytestmark = pytest.mark.django_db

FLOOR = f"{API}/bench/floor"


@pytest.fixture(autouse=True)
def _bench_urls() -> Iterator[None]:
    cache.clear()
    with override_settings(ROOT_URLCONF="bench.http_urls"):
        yield
    cache.clear()


def _body(run: Run, batch: int) -> dict[str, Any]:
    items = [{"type": "log", "payload": {"message": "x" * 200, "n": n}} for n in range(batch)]
    return {**fencing(run), **items[0]} if batch == 1 else {**fencing(run), "events": items}


@pytest.mark.parametrize("batch", [1, 100])
def test_the_floor_answers_as_the_append_does_without_a_statement(batch: int) -> None:
    run = make_claimed_run()
    client = runner_for(run)
    real = client.post(f"{API}/runs/{run.id}/events", _body(run, batch), format="json")
    assert real.status_code == 201, real.content
    with CaptureQueriesContext(connection) as queries:
        floor = client.post(f"{FLOOR}/runs/{run.id}/events", _body(run, batch), format="json")
    assert floor.status_code == 201, floor.content
    assert queries.captured_queries == []
    assert Event.objects.filter(run=run, type="log").count() == batch
    real_items, floor_items = real.json()["items"], floor.json()["items"]
    assert len(floor_items) == len(real_items) == batch
    assert [list(item) for item in floor_items] == [list(item) for item in real_items]
    assert [i["payload"] for i in floor_items] == [i["payload"] for i in real_items]
    assert abs(len(floor.content) - len(real.content)) <= 0.05 * len(real.content)


def test_the_floor_refuses_what_the_append_refuses_before_its_service() -> None:
    run = make_claimed_run()
    client, stranger = runner_for(run), api_client("ar_client_unknown")
    bad = {**fencing(run), "type": "log", "payload": []}
    answers = []
    for path in (f"{API}/runs/{run.id}/events", f"{FLOOR}/runs/{run.id}/events"):
        invalid = client.post(path, bad, format="json")
        refused = stranger.post(path, _body(run, 1), format="json")
        answers.append([(r.status_code, r.json()) for r in (invalid, refused)])
    assert [status for status, _ in answers[0]] == [400, 401]
    assert answers[0] == answers[1]


def test_the_bare_django_reference_echoes_the_body() -> None:
    client = APIClient()
    response = client.post(f"{API}/bench/django/runs/r1/events", {"a": 1}, format="json")
    assert response.status_code == 201 and response.json() == {"a": 1}
