"""Long-polls through the real server (uvicorn, the async events view): many waiters on
one run cost the pool nothing while they wait, and one append wakes every one of them
with a 200, their re-reads bounded below the pool (the issue saw 52 of 150 answer 500)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from agentrun.auth import issue_api_key
from runs.services.event_log import NewEvent, append_runner_events
from runs.waiting import APPLICATION_NAME, stop_run_change_listener
from tests.builders import make_claimed_run
from tests.runtime.server import Server, raw_request, server_backends, serving, wait_for

POOL = 4
WAITERS = 200


def waiting_now(server: Server) -> int:
    text = server.request("GET", "/metrics").body.decode()
    match = re.search(r"^agentrun_long_poll_waiters (\S+)$", text, re.MULTILINE)
    return int(float(match.group(1))) if match else 0


def server_threads(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


async def poll_all(port: int, run_id: str, secret: str, count: int, *, wait: int) -> list:
    path = f"/api/v1/runs/{run_id}/events?after_seq=1&wait={wait}"
    headers = {"Authorization": f"Bearer {secret}"}
    return await asyncio.gather(
        *(raw_request(port, "GET", path, headers) for _ in range(count)), return_exceptions=True
    )


@pytest.mark.django_db(transaction=True)
def test_200_waiters_on_one_run_are_all_woken_by_one_append_with_no_error() -> None:
    stop_run_change_listener()  # this process's own, if an earlier test started one
    run = make_claimed_run(runner_id="r1")
    secret = issue_api_key(tenant_id="tenant-a", role="client").secret
    with serving(AGENTRUN_DB_POOL_SIZE=str(POOL)) as server:
        loop = asyncio.new_event_loop()
        try:
            polls = loop.create_task(poll_all(server.port, run.id, secret, WAITERS, wait=30))
            loop.run_until_complete(asyncio.sleep(0))  # connect and send
            waiter_count = wait_for(
                lambda: loop.run_until_complete(asyncio.sleep(0.2))
                or waiting_now(server) >= WAITERS,
                within_s=120,
                what=f"{WAITERS} waiters",
            )
            backends = server_backends()
            threads = server_threads(server)
            append_runner_events(
                run_id=run.id, runner_id="r1", lease_epoch=1, events=[NewEvent("log", {})]
            )
            replies = loop.run_until_complete(asyncio.wait_for(polls, timeout=120))
        finally:
            loop.close()
    assert waiter_count
    # The server holds its pool (at most POOL) and the one listener, not one per waiter.
    assert len(backends) <= POOL + 1, backends
    assert sum(name == APPLICATION_NAME for _, name in backends) == 1, backends
    # Nor a thread per waiter (the wait is awaited on the event loop): a handful in all.
    assert threads < 30, threads
    errors = [r for r in replies if isinstance(r, BaseException) or r.status != 200]
    assert errors == []
    pages = [r.json() for r in replies]
    assert all([e["seq"] for e in p["items"]] == [2] and not p["timed_out"] for p in pages)


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_through_the_server_times_out_empty() -> None:
    run = make_claimed_run(runner_id="r1")
    secret = issue_api_key(tenant_id="tenant-a", role="client").secret
    with serving() as server:
        reply = server.request(
            "GET",
            f"/api/v1/runs/{run.id}/events?after_seq=1&wait=1",
            headers={"Authorization": f"Bearer {secret}"},
        )
    assert reply.status == 200, reply.body
    assert reply.json() == {"items": [], "count": 0, "next_after_seq": 1, "timed_out": True}
    assert reply.headers.get("x-request-id")
