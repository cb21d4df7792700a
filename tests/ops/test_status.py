"""`agentrun_status` (text and `--json`) and the admin dashboard tell the database's truth
about known backlogs."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client

from tests.ops.world import RUNNER, World, build_world, stale_runner

pytestmark = pytest.mark.django_db(transaction=True)


def scalar(query: str, *params: Any) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchone()[0]


def status_json() -> dict[str, Any]:
    out = io.StringIO()
    call_command("agentrun_status", "--json", "--items", "10", stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.fixture
def world() -> World:
    built = build_world()
    stale_runner(minutes=60)
    return built


def test_status_json_matches_the_database(world: World) -> None:
    status = status_json()
    dispatch = status["dispatch"]
    assert (dispatch["pending_count"], dispatch["retry_count"], dispatch["backlog_count"]) == (
        1,
        1,
        2,
    )
    assert dispatch["dispatched_count"] == 1 and dispatch["due_count"] == 1
    assert [item["id"] for item in dispatch["oldest"]] == [world.retrying.id, world.pending.id]
    undelivered = scalar(
        "SELECT count(*) FROM agentrun_kafka_event_outbox WHERE delivered_at IS NULL"
    )
    retrying = scalar(
        "SELECT count(*) FROM agentrun_kafka_event_outbox "
        "WHERE delivered_at IS NULL AND attempt_count > 0"
    )
    outbox = status["outbox"]
    assert (outbox["backlog"], outbox["retrying"]) == (undelivered, retrying) and retrying >= 2
    assert len(outbox["oldest"]) == min(10, undelivered)
    assert outbox["first_error"]["message"] == "broker unreachable"
    queue = status["queue"]
    assert queue["by_state"]["pending"] == 1 and queue["by_state"]["running"] == 1
    assert [item["id"] for item in queue["oldest"]] == [world.pending_task.id]
    for state in ("pending", "claimed", "running"):
        expected = scalar("SELECT count(*) FROM agentrun_runs WHERE status = %s", state)
        assert status["runs"]["live"][state] == expected
    assert status["runs"]["terminal_last_24h"]["cancelled"] == 1
    assert (
        status["sessions"]["running"]
        == scalar("SELECT count(*) FROM agentrun_sessions WHERE execution_state = 'running'")
        == 1
    )
    runners = status["runners"]
    assert runners["stale_count"] == 1 and runners["stale"][0]["id"] == RUNNER
    assert runners["stale"][0]["run_id"] == world.session_run.id


def test_status_text_names_every_section(world: World) -> None:
    out = io.StringIO()
    call_command("agentrun_status", stdout=out)
    text = out.getvalue()
    for section in (
        "dispatch  open 2",
        "outbox    on",
        "queue     pending 1",
        "runs      live",
        "sessions  running 1",
        "runners   stale",
    ):
        assert section in text, section
    assert world.retrying.id in text and RUNNER in text


def test_the_dashboard_shows_the_same_facts(staff: Client, world: World) -> None:
    index = staff.get("/admin/")
    assert b'href="/admin/status/"' in index.content
    page = staff.get("/admin/status/")
    body = page.content.decode()
    assert page.status_code == 200
    for item in (
        world.retrying.id,
        world.pending.id,
        world.pending_task.id,
        RUNNER,
        world.retrying_record.id,
        "broker unreachable",
    ):
        assert item in body, item
