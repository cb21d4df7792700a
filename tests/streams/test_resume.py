"""Resume exactness against the real server (uvicorn, `ops.server`): a client reads part
of a stream, disconnects, reconnects with `Last-Event-ID`, and what it got in all equals
`GET /events` exactly, at every cut point: before the first event, inside a run, at a run
boundary of a session, after the terminal event; and across a restart of the server."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from agentrun.auth import issue_api_key
from runs.services.event_log import NewEvent, append_runner_events
from runs.streams import PAGE_SIZE
from sessions.selectors import OUTPUT_EVENT_TYPES
from tests.builders import make_claimed_run
from tests.runtime.server import Server, serving
from tests.sessions.world import finish_whole_run
from tests.streams.world import TENANT, events_api, read, worked_turn


def _resumed_at_every_cut(server: Server, path: str, secret: str) -> list[list[Any]]:
    """For each cut k: k events on one connection, the rest on a resumed one."""
    whole = read(server, path, secret)
    outcomes = []
    for cut in range(len(whole.events) + 1):
        first = read(server, path, secret, stop_after=cut)
        last_id = first.events[-1].id if first.events else None
        rest = read(server, path, secret, last_event_id=last_id)
        outcomes.append([m.json() for m in first.events + rest.events])
    return [[m.json() for m in whole.events], *outcomes]


@pytest.mark.django_db(transaction=True)
def test_a_run_stream_resumes_exactly_at_every_point_and_follows_live_appends() -> None:
    run = make_claimed_run(runner_id="r1")
    secret = issue_api_key(tenant_id=TENANT, role="client").secret
    path = f"/api/v1/runs/{run.id}/stream"

    def work() -> None:  # the runner, appending while the client reads
        for batch in range(8):
            events = [NewEvent("agent_message", {"text": f"{batch}.{i}"}) for i in range(3)]
            append_runner_events(run_id=run.id, runner_id="r1", lease_epoch=1, events=events)
        finish_whole_run(run, runner_id="r1")

    with serving() as server:
        # Live: connected before the runner's first event, cut at random points.
        rng = random.Random(19)
        writer = threading.Thread(target=work)
        got = read(server, path, secret, stop_after=1).events  # the claim's event is there
        writer.start()
        while not got or got[-1].event != "terminal_status":
            part = read(
                server, path, secret, last_event_id=got[-1].id, stop_after=rng.randint(1, 4)
            )
            got += part.events
        writer.join()
        expected = events_api(server, run.id, secret)
        assert [m.json() for m in got] == expected
        assert [m.id for m in got] == [str(e["seq"]) for e in expected]
        assert [m.event for m in got] == [e["type"] for e in expected]
        # Ended run: every cut point, the last one after the terminal event.
        for outcome in _resumed_at_every_cut(server, path, secret):
            assert outcome == expected
        after_end = read(server, path, secret, last_event_id=str(expected[-1]["seq"]))
        assert after_end.events == [] and after_end.ended
        by_query = read(server, f"{path}?after_seq=20", secret)
        assert [m.json() for m in by_query.events] == expected[20:]


@pytest.mark.django_db(transaction=True)
def test_a_session_stream_resumes_exactly_across_three_turns_and_a_server_restart() -> None:
    session_id = "s-stream-3"
    runs = [worked_turn(session_id, f"turn {n}") for n in range(3)]
    secret = issue_api_key(tenant_id=TENANT, role="client").secret
    path = f"/api/v1/sessions/{session_id}/stream"
    with serving() as server:
        expected = [e for run in runs for e in events_api(server, run.id, secret)]
        whole = read(server, path, secret, stop_after=len(expected))
        assert [m.json() for m in whole.events] == expected
        assert [m.id for m in whole.events] == [f"{e['run_id']}:{e['seq']}" for e in expected]
        for cut in range(len(expected) + 1):
            first = read(server, path, secret, stop_after=cut)
            last_id = first.events[-1].id if first.events else None
            rest = read(server, path, secret, last_event_id=last_id, stop_after=len(expected) - cut)
            assert [m.json() for m in first.events + rest.events] == expected, cut
        shown = [e for e in expected if e["type"] in OUTPUT_EVENT_TYPES]
        output = read(server, f"{path}?only=output", secret, stop_after=len(shown))
        assert [m.json() for m in output.events] == shown
        resumed = read(
            server,
            f"{path}?only=output",
            secret,
            last_event_id=output.events[6].id,
            stop_after=len(shown) - 7,
        )
        assert [m.json() for m in resumed.events] == shown[7:]
        cut_at = len(expected) // 2
        first = read(server, path, secret, stop_after=cut_at)
    # The server stops between the two connections; the next one resumes exactly.
    with serving() as restarted:
        worked_turn(session_id, "turn 3")  # a fourth turn while nobody listens
        expected = [e for run in runs for e in events_api(restarted, run.id, secret)]
        fourth = [r for r in events_api_runs(restarted, session_id, secret) if r not in expected]
        rest = read(
            restarted,
            path,
            secret,
            last_event_id=first.events[-1].id,
            stop_after=len(expected) + len(fourth) - cut_at,
        )
        assert [m.json() for m in first.events + rest.events] == expected + fourth


def events_api_runs(server: Server, session_id: str, secret: str) -> list[dict[str, Any]]:
    from runs.models import Run

    runs = Run.objects.filter(session_ref__session_id=session_id).order_by("created_at", "id")
    return [e for run in runs for e in events_api(server, run.id, secret)]


def test_a_page_is_bounded() -> None:
    assert PAGE_SIZE <= 500
