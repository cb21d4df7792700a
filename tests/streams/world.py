"""Shared pieces of the stream tests: turns made through the real services, and a stream
reader on the real server (runner/sse.py, the client `agentrun tail` uses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.sse import Message, messages, open_stream
from runs.models import Run
from runs.services.event_log import NewEvent, append_runner_events
from tests.runtime.server import Server
from tests.sessions.helpers import admit
from tests.sessions.world import claim, finish_turn, finish_whole_run

TENANT = "tenant-a"


def worked_turn(session_id: str, text: str, *, outputs: int = 3, tenant_id: str = TENANT) -> Run:
    """A turn of `session_id` admitted, claimed, answered with `outputs` agent messages
    (and a log line between each, not output), and its run finished."""
    turn = admit(session_id, text, tenant_id=tenant_id)
    assert turn.run is not None and turn.command is not None
    run = claim(turn.run.id)
    events = []
    for index in range(outputs):
        events += [
            NewEvent("log", {"line": index}),
            NewEvent("agent_message", {"text": f"{text} {index}"}),
        ]
    append_runner_events(
        run_id=run.id, runner_id="runner-1", lease_epoch=run.lease_epoch, events=events
    )
    finish_turn(run, turn.command.id)
    return finish_whole_run(run)  # the runner ends its run after its turn


@dataclass
class Read:
    """What one connection delivered, and whether the server ended the stream."""

    events: list[Message]
    ended: bool


def read(
    server: Server,
    path: str,
    secret: str,
    *,
    last_event_id: str | None = None,
    stop_after: int | None = None,
    timeout_s: float = 30,
) -> Read:
    """Read a stream until the server ends it, or `stop_after` events; then disconnect."""
    connection, response = open_stream(
        f"http://127.0.0.1:{server.port}{path}",
        headers={"Authorization": f"Bearer {secret}"},
        last_event_id=last_event_id,
        timeout_s=timeout_s,
    )
    got: list[Message] = []
    try:
        if stop_after == 0:
            return Read(got, False)
        for message in messages(response):
            if message is None:
                continue
            got.append(message)
            if stop_after is not None and len(got) >= stop_after:
                return Read(got, False)
        return Read(got, True)
    finally:
        connection.close()


def events_api(server: Server, run_id: str, secret: str) -> list[dict[str, Any]]:
    """Every event of a run, as `GET /runs/{id}/events` pages them."""
    items: list[dict[str, Any]] = []
    while True:
        after = items[-1]["seq"] if items else 0
        reply = server.request(
            "GET",
            f"/api/v1/runs/{run_id}/events?after_seq={after}&limit=500",
            headers={"Authorization": f"Bearer {secret}"},
        )
        assert reply.status == 200, reply.body
        page = reply.json()["items"]
        if not page:
            return items
        items += page
