"""Every error status on every non-admin route answers the JSON envelope, through the real
server (uvicorn, `ops.server.server_argv`): raw requests, so that what Django answers
before any view (an unknown URL, a bad Host, too many fields, a body too large, a server
error) is seen as a client sees it. `/admin/` keeps Django's HTML. A conflict's failure kind
is `conflict`, never `schema-invalid`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from django.db import connection
from rest_framework.exceptions import Throttled

from agentrun.auth import issue_api_key
from agentrun.errors import exception_handler
from tests.api.helpers import ENVELOPE_KEYS, run_body
from tests.builders import make_claimed_run
from tests.runtime.server import Reply, Server, database_url_of_tests, raw_request, serving

MAX_BODY = 4096
SERVER_ENV = {
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "AGENTRUN_MAX_REQUEST_BYTES": str(MAX_BODY),
    "AGENTRUN_DB_POOL_SIZE": "2",
    "AGENTRUN_DB_POOL_TIMEOUT_S": "0.5",
}


@dataclass
class World:
    server: Server
    client: str  # a client key's secret
    runner: str  # a runner key's secret, for `run`
    run: str

    def send(self, method: str, path: str, body: bytes = b"", **headers: str) -> Reply:
        return self.server.request(method, path, body=body or None, headers=headers)

    def auth(self, secret: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret or self.client}"}


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[Server]:
    with serving(**SERVER_ENV) as running:
        yield running


@pytest.fixture
def world(server: Server, transactional_db: None) -> World:
    run = make_claimed_run(runner_id="r1")
    client = issue_api_key(tenant_id="tenant-a", role="client").secret
    runner = issue_api_key(tenant_id="tenant-a", role="runner", run_id=run.id).secret
    return World(server, client, runner, run.id)


def _json(**headers: str) -> dict[str, str]:
    return {"Content-Type": "application/json", **headers}


def unknown_url(w: World) -> Reply:
    return w.send("GET", "/no/such/route")


def unknown_api_url(w: World) -> Reply:
    return w.send("GET", "/api/v1/no-such-thing", **w.auth())


def method_on_plain_view(w: World) -> Reply:
    return w.send("OPTIONS", "/healthz")  # a safe method: no CSRF check answers first


def method_on_api_view(w: World) -> Reply:
    return w.send("PUT", "/api/v1/runs", b"{}", **_json(**w.auth()))


def not_acceptable(w: World) -> Reply:
    return w.send("GET", "/api/v1/runs", Accept="text/html", **w.auth())


def body_too_large(w: World) -> Reply:
    body = json.dumps(run_body(title="x" * (2 * MAX_BODY))).encode()
    return w.send("POST", "/api/v1/runs", body, **_json(**w.auth()))


def unsupported_media_type(w: World) -> Reply:
    return w.send("POST", "/api/v1/runs", b"hello", **{"Content-Type": "text/plain"}, **w.auth())


def too_many_fields(w: World) -> Reply:
    query = "&".join(f"f{n}=1" for n in range(1001))
    return w.send("GET", f"/api/v1/runs?{query}", **w.auth())


def bad_host(w: World) -> Reply:
    return w.send("GET", "/api/v1/runs", Host="evil.example", **w.auth())


def unauthenticated(w: World) -> Reply:
    return w.send("GET", "/api/v1/runs")


def conflict(w: World) -> Reply:
    """The same run id filed again with a different input."""
    first = json.dumps(run_body(id="run_conflict_1")).encode()
    assert w.send("POST", "/api/v1/runs", first, **_json(**w.auth())).status == 201
    other = json.dumps(run_body(id="run_conflict_1", project_id="another")).encode()
    return w.send("POST", "/api/v1/runs", other, **_json(**w.auth()))


def server_error(w: World) -> Reply:
    """A real unhandled exception: the runs table is gone for the length of one request."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE agentrun_runs RENAME TO agentrun_runs_away")
    try:
        return w.send("GET", "/api/v1/runs", **w.auth())
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE agentrun_runs_away RENAME TO agentrun_runs")


def pool_exhausted(w: World) -> Reply:
    """Two appends hold the pool's two connections waiting on a run lock the test holds; a
    third finds no connection within the pool timeout."""
    body = json.dumps({"runner_id": "r1", "lease_epoch": 1, "type": "log", "payload": {}})
    headers = _json(**w.auth(w.runner))
    path = f"/api/v1/runs/{w.run}/events"

    async def first_of_three(holder: psycopg.Connection[Any]) -> Reply:
        tasks = [
            asyncio.ensure_future(raw_request(w.server.port, "POST", path, headers, body.encode()))
            for _ in range(3)
        ]
        done, _ = await asyncio.wait(tasks, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        holder.commit()  # the lock goes: the two blocked appends finish
        await asyncio.gather(*tasks)
        return done.pop().result()

    with psycopg.connect(database_url_of_tests()) as holder:
        holder.execute("SELECT 1 FROM agentrun_runs WHERE id = %s FOR UPDATE", [w.run])
        return asyncio.run(first_of_three(holder))


CASES: list[tuple[Callable[[World], Reply], int, str, str | None]] = [
    (unknown_url, 404, "not_found", None),
    (unknown_api_url, 404, "not_found", None),
    (method_on_plain_view, 405, "method_not_allowed", None),
    (method_on_api_view, 405, "method_not_allowed", None),
    (not_acceptable, 406, "not_acceptable", "schema-invalid"),
    (body_too_large, 413, "request_too_large", "schema-invalid"),
    (unsupported_media_type, 415, "unsupported_media_type", "schema-invalid"),
    (too_many_fields, 400, "bad_request", "schema-invalid"),
    (bad_host, 400, "bad_request", "schema-invalid"),
    (unauthenticated, 401, "unauthorized", None),
    (conflict, 409, "conflict", "conflict"),
    (server_error, 500, "internal_error", "infra-failed"),
    (pool_exhausted, 503, "database_busy", "infra-failed"),
]


@pytest.mark.parametrize(
    ("case", "status", "code", "failure_kind"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_every_error_status_is_the_json_envelope(
    world: World, case: Callable[[World], Reply], status: int, code: str, failure_kind: str | None
) -> None:
    reply = case(world)
    assert reply.status == status, (reply.body[:300], world.server.log_text())
    assert reply.content_type == "application/json", reply.headers
    error = reply.json()["error"]
    assert set(error) == ENVELOPE_KEYS
    assert (error["code"], error["failure_kind"]) == (code, failure_kind), error
    if status == 405:
        assert reply.headers.get("allow"), reply.headers
    if status == 503:
        assert reply.headers.get("retry-after") == "1"


def test_a_429_is_the_envelope_with_retry_after() -> None:
    """No route throttles today; a DRF throttle's 429 is rendered by the same handler."""
    response = exception_handler(Throttled(wait=3), {})
    assert response is not None and response.status_code == 429
    assert response["Retry-After"] == "3"
    error = response.data["error"]
    assert (error["code"], error["failure_kind"]) == ("throttled", "rate-limited")


def test_the_admin_keeps_django_html(world: World) -> None:
    reply = world.send("GET", "/admin/login/", Host="localhost")
    assert reply.status == 200 and reply.content_type.startswith("text/html")
    refused = world.send("PUT", "/admin/login/", Host="localhost")  # CSRF: Django's 403 page
    assert refused.status == 403 and refused.content_type.startswith("text/html")
    missing = world.send("GET", "/admin/no-such-page/", Host="localhost")
    assert missing.status in (302, 404) and "json" not in missing.content_type
