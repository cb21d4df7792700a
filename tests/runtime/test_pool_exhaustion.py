"""Pool exhaustion through the real server: with a pool of 2 and 20 concurrent appends to a
run that the test holds locked, two requests wait on the lock holding both connections and
the rest wait briefly for one, then answer 503 `database_busy` with Retry-After. None is a
500, none fails the run, and the two that waited append once the lock is let go (the issue
saw HTML 500s and runs failed `infra-failed` when the API ran out of connections)."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from agentrun.auth import issue_api_key
from runs.models import Event, Run
from tests.builders import make_claimed_run
from tests.runtime.server import Reply, database_url_of_tests, raw_request, serving, wait_for

REQUESTS = 20


def append(port: int, run_id: str, secret: str, n: int) -> asyncio.Future[Reply]:
    body = json.dumps({"runner_id": "r1", "lease_epoch": 1, "type": "log", "payload": {"n": n}})
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    coroutine = raw_request(port, "POST", f"/api/v1/runs/{run_id}/events", headers, body.encode())
    return asyncio.ensure_future(coroutine)


@pytest.mark.django_db(transaction=True)
def test_a_full_pool_answers_503_json_with_retry_after_and_fails_no_run() -> None:
    run = make_claimed_run(runner_id="r1")
    secret = issue_api_key(tenant_id="tenant-a", role="runner", run_id=run.id).secret
    env = {"AGENTRUN_DB_POOL_SIZE": "2", "AGENTRUN_DB_POOL_TIMEOUT_S": "1"}
    with serving(**env) as server, psycopg.connect(database_url_of_tests()) as holder:
        holder.execute("SELECT 1 FROM agentrun_runs WHERE id = %s FOR UPDATE", [run.id])
        loop = asyncio.new_event_loop()
        try:
            tasks = [
                loop.run_until_complete(_started(server.port, run.id, secret, n))
                for n in range(REQUESTS)
            ]
            # Two hold the pool's connections, blocked on the lock; the others give up.
            wait_for(
                lambda: _pump(loop) or sum(t.done() for t in tasks) >= REQUESTS - 2,
                within_s=120,
                what="the requests that found no connection to answer",
            )
            holder.commit()  # the lock goes; the two blocked appends go through
            replies = loop.run_until_complete(asyncio.gather(*tasks))
        finally:
            loop.close()
    statuses = sorted(r.status for r in replies)
    busy = [r for r in replies if r.status == 503]
    assert set(statuses) <= {201, 503} and busy, (statuses, server.log_text())
    for reply in busy:
        assert reply.content_type == "application/json"
        assert reply.headers["retry-after"] == "1"
        error = reply.json()["error"]
        assert (error["code"], error["failure_kind"]) == ("database_busy", "infra-failed")
        assert set(error) == {"code", "failure_kind", "message", "details"}
    assert statuses.count(201) >= 1
    stored = Run.objects.get(pk=run.id)
    assert stored.status != "failed" and stored.failure_kind is None
    # Each 201 appended its event once; no 503 appended anything.
    assert Event.objects.filter(run_id=run.id, type="log").count() == statuses.count(201)


async def _started(port: int, run_id: str, secret: str, n: int) -> asyncio.Future[Reply]:
    return append(port, run_id, secret, n)


def _pump(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(asyncio.sleep(0.1))
