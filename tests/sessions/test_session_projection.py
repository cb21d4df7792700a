"""The session row follows its runs: claims, finishes, thread reports, titles, boundaries."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from runs.models import Run
from runs.services.lifecycle import create_run
from sessions.models import Session
from tests.api.helpers import error_of, run_body
from tests.builders import key_client, run_spec
from tests.runs.threads import race
from tests.sessions.helpers import admit, admit_in_open_transaction
from tests.sessions.world import (
    API,
    claim,
    clients,
    finish_turn,
    finish_whole_run,
    idle_session,
    session,
    written,
)


@pytest.mark.django_db
def test_a_turn_runs_its_session_through_running_to_terminal() -> None:
    turn = admit("s-life", "first")
    admitted = session("s-life")
    assert (admitted.execution_state, admitted.active_run_id) == ("running", turn.run.id)
    run = claim(turn.run.id)
    claimed = session("s-life")
    assert (claimed.execution_state, claimed.active_run_id, claimed.last_run_id) == (
        "running",
        run.id,
        run.id,
    )
    finish_turn(run, turn.command.id, thread_id="thread-1", turn_id="bt-1")
    finished = session("s-life")
    assert finished.version > claimed.version
    assert (finished.execution_state, finished.terminal_status, finished.failure_kind) == (
        "terminal",
        "completed",
        None,
    )
    assert (finished.active_run_id, finished.active_command_id) == (None, None)
    assert (finished.last_run_id, finished.last_command_id) == (run.id, turn.command.id)
    assert finished.thread_id == "thread-1"
    assert finished.metadata["last_turn_id"] == "bt-1"
    assert Run.objects.get(pk=run.id).session_ref["thread_id"] == "thread-1"
    assert finished.last_event_seq == run.events.order_by("-seq")[0].seq


@pytest.mark.django_db
def test_a_failed_run_leaves_its_failure_on_the_session() -> None:
    turn = admit("s-fail", "first")
    run = claim(turn.run.id)
    finish_whole_run(
        run, terminal_status="failed", failure_kind="backend-failed", thread_id="thread-9"
    )
    failed = session("s-fail")
    assert (failed.execution_state, failed.terminal_status, failed.failure_kind) == (
        "terminal",
        "failed",
        "backend-failed",
    )
    assert failed.thread_id == "thread-9"
    assert Run.objects.get(pk=run.id).session_ref["thread_id"] == "thread-9"


@pytest.mark.django_db
def test_the_next_run_of_a_session_resumes_its_reported_thread() -> None:
    turn = admit("s-resume", "first")
    run = claim(turn.run.id)
    finish_turn(run, turn.command.id, thread_id="thread-7")
    finish_whole_run(run)
    second = admit("s-resume", "second")
    assert second.run.session_ref["thread_id"] == "thread-7"


@pytest.mark.django_db
def test_a_late_finish_of_an_old_run_does_not_clobber_the_newer_turn() -> None:
    old = admit("s-late", "first")
    old_run = claim(old.run.id)
    finish_turn(old_run, old.command.id)
    new = admit("s-late", "second")
    finish_whole_run(old_run)
    now = session("s-late")
    assert (now.execution_state, now.active_run_id, now.active_command_id) == (
        "running",
        new.run.id,
        new.command.id,
    )
    assert (now.last_run_id, now.terminal_status) == (new.run.id, None)


def _wait_until_blocked_on_a_lock(pid_holder: list[int]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if pid_holder:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid_holder[0]]
                )
                row = cursor.fetchone()
            if row and row[0] == "Lock":
                return
        time.sleep(0.02)
    raise AssertionError("the late finish never waited for the session lock")


@pytest.mark.django_db(transaction=True)
def test_a_late_finish_racing_a_new_turn_does_not_clobber_it() -> None:
    """The finish decides "still current?" only once it holds the session row: here it
    reads the session while an admission that makes a newer turn is still uncommitted."""
    old = admit("s-late-race", "first")
    old_run = claim(old.run.id)
    finish_turn(old_run, old.command.id)
    finisher_pid: list[int] = []

    def late_finish() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                finisher_pid.append(cursor.fetchone()[0])
            finish_whole_run(old_run)
        finally:
            connection.close()

    with transaction.atomic():
        new = admit_in_open_transaction("s-late-race", "second")  # holds the session row
        finisher = threading.Thread(target=late_finish)
        finisher.start()
        _wait_until_blocked_on_a_lock(finisher_pid)
    finisher.join(timeout=30)
    assert Run.objects.get(pk=old_run.id).status == "completed"
    now = session("s-late-race")
    assert (now.execution_state, now.active_run_id, now.active_command_id) == (
        "running",
        new.run.id,
        new.command.id,
    )


@pytest.mark.django_db
def test_the_title_comes_from_the_first_turn_and_stays() -> None:
    first = admit("s-title", "  write   a haiku\nabout autumn ")
    assert session("s-title").title == "write a haiku about autumn"
    run = claim(first.run.id)
    finish_turn(run, first.command.id)
    finish_whole_run(run)
    second = admit("s-title", "now one about winter")
    assert session("s-title").title == "write a haiku about autumn"
    run = claim(second.run.id)
    finish_turn(run, second.command.id)
    admit("s-title", "   ")  # a blank text has no title to offer and takes none away
    assert session("s-title").title == "write a haiku about autumn"


@pytest.mark.django_db
def test_a_long_first_turn_gives_a_shortened_title() -> None:
    admit("s-long-title", "word " * 100)
    title = session("s-long-title").title
    assert title is not None and len(title) == 120 and title.endswith("…")


@pytest.mark.django_db
def test_a_metadata_title_wins_over_the_turn_text() -> None:
    create_run(
        tenant_id="tenant-a",
        spec=run_spec(session_ref={"session_id": "s-new-meta", "metadata": {"title": "Refactor"}}),
    )
    admit("s-new-meta", "first text")
    assert session("s-new-meta").title == "Refactor"


@pytest.mark.django_db
def test_creating_a_run_with_a_session_ref_creates_the_session() -> None:
    response = key_client(role="client").post(
        f"{API}/runs",
        run_body(session_ref={"session_id": "s-by-run", "conversation_id": "conv-1"}),
        format="json",
    )
    assert response.status_code == 201, response.json()
    created = session("s-by-run")
    assert (created.tenant_id, created.project_id, created.backend_profile) == (
        "tenant-a",
        "proj-1",
        "scripted",
    )
    assert created.conversation_id == "conv-1"
    assert created.last_run_id == response.json()["id"]
    assert created.execution_state == "idle"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tenant_id", "overrides", "field"),
    [
        ("tenant-a", {"project_id": "proj-2"}, "project_id"),
        ("tenant-a", {"backend_profile": "codex"}, "backend_profile"),
    ],
)
def test_a_run_for_a_session_across_its_boundary_is_a_conflict(
    tenant_id: str, overrides: dict[str, str], field: str
) -> None:
    idle_session("s-bounded")
    before = written()
    response = key_client(role="client", tenant_id=tenant_id).post(
        f"{API}/runs", run_body(session_ref={"session_id": "s-bounded"}, **overrides), format="json"
    )
    error = error_of(response, 409)
    assert error["code"] == "session_boundary"
    assert error["details"]["fields"] == [field]
    assert written() == before


@pytest.mark.django_db
def test_a_run_for_another_tenants_session_is_a_404_that_reveals_nothing() -> None:
    idle_session("s-bounded")
    before = written()
    response = key_client(role="client", tenant_id="tenant-b").post(
        f"{API}/runs", run_body(session_ref={"session_id": "s-bounded"}), format="json"
    )
    assert error_of(response, 404)["code"] == "not_found"
    assert written() == before


@pytest.mark.django_db(transaction=True)
def test_concurrent_runs_naming_one_new_session_all_land_in_it() -> None:
    racers = clients(6)
    body = run_body(session_ref={"session_id": "s-new-race"})
    results = race([lambda c=c: c.post(f"{API}/runs", body, format="json") for c in racers])
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert [r.status_code for r in results] == [201] * 6, [r.json() for r in results]
    assert Session.objects.filter(pk="s-new-race").count() == 1
    assert Run.objects.filter(session_ref__session_id="s-new-race").count() == 6
