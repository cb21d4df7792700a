"""Long-poll: wake promptly on an append from another connection, or time out empty."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from runs.services.events import NewEvent, append_runner_events
from runs.waiting import wait_for_event
from tests.builders import key_client, make_claimed_run


@pytest.mark.django_db(transaction=True)
def test_a_waiter_returns_within_100ms_of_an_append_on_another_connection() -> None:
    run = make_claimed_run(runner_id="r1")
    woke: dict[str, float] = {}

    def waiter() -> None:
        try:
            woke["changed"] = wait_for_event(run_id=run.id, after_seq=1, timeout_s=10)
            woke["at"] = time.monotonic()
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.5)  # let the waiter LISTEN and find nothing yet
    append_runner_events(
        run_id=run.id, runner_id="r1", lease_epoch=1, events=[NewEvent("log", {"line": "hello"})]
    )
    committed_at = time.monotonic()
    thread.join(timeout=15)
    assert woke["changed"] is True
    assert woke["at"] - committed_at < 0.1, woke["at"] - committed_at


@pytest.mark.django_db(transaction=True)
def test_a_waiter_returns_false_at_its_timeout_when_nothing_is_appended() -> None:
    run = make_claimed_run(runner_id="r1")
    started = time.monotonic()
    assert wait_for_event(run_id=run.id, after_seq=1, timeout_s=0.3) is False
    assert time.monotonic() - started >= 0.3


@pytest.mark.django_db(transaction=True)
def test_an_event_already_there_returns_at_once() -> None:
    run = make_claimed_run(runner_id="r1")
    assert wait_for_event(run_id=run.id, after_seq=0, timeout_s=5) is True


@pytest.mark.django_db(transaction=True)
def test_http_long_poll_returns_the_new_event_or_times_out_empty() -> None:
    run = make_claimed_run(runner_id="r1")
    api = key_client(role="client")
    empty = api.get(f"/api/v1/runs/{run.id}/events", {"after_seq": 1, "wait": 0.2}).json()
    assert empty["items"] == [] and empty["timed_out"] is True
    assert empty["next_after_seq"] == 1

    timer = threading.Timer(
        0.3,
        lambda: (
            append_runner_events(
                run_id=run.id, runner_id="r1", lease_epoch=1, events=[NewEvent("log", {"n": 1})]
            ),
            connection.close(),
        ),
    )
    timer.start()
    page = api.get(f"/api/v1/runs/{run.id}/events", {"after_seq": 1, "wait": 10}).json()
    timer.join()
    assert [(e["seq"], e["type"]) for e in page["items"]] == [(2, "log")]
    assert page["timed_out"] is False and page["next_after_seq"] == 2


@pytest.mark.django_db(transaction=True)
def test_fifty_waiters_share_one_listen_connection_and_all_wake() -> None:
    runs = [make_claimed_run(runner_id="r1") for _ in range(5)]
    results: list[bool] = []

    def waiter(run_id: str) -> None:
        try:
            results.append(wait_for_event(run_id=run_id, after_seq=1, timeout_s=15))
        finally:
            connection.close()

    threads = [threading.Thread(target=waiter, args=(runs[i % 5].id,)) for i in range(50)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN agentrun_run_change%%'"
        )
        listeners = cursor.fetchone()[0]
    for run in runs:
        append_runner_events(
            run_id=run.id, runner_id="r1", lease_epoch=1, events=[NewEvent("log", {"line": "wake"})]
        )
    for thread in threads:
        thread.join(timeout=20)
    assert listeners == 1
    assert results == [True] * 50
