"""Long-poll: wake promptly on an append from another connection, or time out empty; and
sleep without a database connection, so hundreds of waiters fit a 100-connection server."""

from __future__ import annotations

import threading
import time

import pytest
from django.conf import settings
from django.db import connection

from agentrun.auth import issue_api_key
from runs.models import Event
from runs.services.event_log import NewEvent, append_runner_events
from runs.waiting import APPLICATION_NAME, wait_for_event
from tests.builders import api_client, key_client, make_claimed_run


def append_log(run_id: str) -> None:
    append_runner_events(
        run_id=run_id, runner_id="r1", lease_epoch=1, events=[NewEvent("log", {"line": "wake"})]
    )


def server_connections() -> int:
    """Backends connected to the test database now, this thread's own included."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def connections_lent() -> int:
    """Connections of this process's pool lent out now (all of them without a pool)."""
    pool = connection.pool
    if pool is None:
        return server_connections() - 1
    stats = pool.get_stats()
    return int(stats["pool_size"] - stats["pool_available"])


def wait_lent_at_most(limit: int, *, within_s: float) -> int:
    deadline = time.monotonic() + within_s
    while (lent := connections_lent()) > limit and time.monotonic() < deadline:
        time.sleep(0.1)
    return lent


def listener_pid() -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            [APPLICATION_NAME],
        )
        rows = cursor.fetchall()
    assert len(rows) <= 1, rows
    return rows[0][0] if rows else None


def settles_at_most(limit: int, *, within_s: float) -> int:
    """Poll the connection count until it is at most `limit`; the last count seen."""
    deadline = time.monotonic() + within_s
    while (count := server_connections()) > limit and time.monotonic() < deadline:
        time.sleep(0.1)
    return count


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
    listener = listener_pid()  # at most one, checked inside
    for run in runs:
        append_log(run.id)
    for thread in threads:
        thread.join(timeout=20)
    assert listener is not None
    assert results == [True] * 50


@pytest.mark.django_db(transaction=True)
def test_two_hundred_sleeping_waiters_hold_no_server_connections_and_all_wake() -> None:
    """200 waiters on a server allowing 100 connections: each first uses its thread's
    connection (as a request does before it waits), then sleeps without it."""
    runs = [make_claimed_run(runner_id="r1") for _ in range(200)]
    results: dict[str, bool] = {}
    errors: list[BaseException] = []

    def waiter(run_id: str, armed: threading.Event) -> None:
        try:
            assert Event.objects.filter(run_id=run_id).exists()  # opens this thread's connection
            armed.set()
            results[run_id] = wait_for_event(run_id=run_id, after_seq=1, timeout_s=60)
        except BaseException as error:
            errors.append(error)
            armed.set()
        finally:
            connection.close()

    threads = []
    for run in runs:  # started one by one: at most a couple of connections open at once
        armed = threading.Event()
        threads.append(threading.Thread(target=waiter, args=(run.id, armed)))
        threads[-1].start()
        assert armed.wait(10)
    sleeping = settles_at_most(settings.AGENTRUN_DB_POOL_SIZE + 2, within_s=10)
    lent = wait_lent_at_most(1, within_s=10)
    still_waiting = sum(thread.is_alive() for thread in threads)
    for run in runs:
        append_log(run.id)
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert still_waiting == 200
    # This thread's connection and the listener's, not one per waiter.
    # The pool may keep idle what earlier tests borrowed (at most its size), but lends none
    # to a sleeping waiter: the listener's connection is the only one they cost.
    assert lent <= 1, f"{lent} pooled connections lent while 200 waiters sleep"
    assert sleeping <= settings.AGENTRUN_DB_POOL_SIZE + 2, sleeping
    assert results == {run.id: True for run in runs}


@pytest.mark.django_db(transaction=True)
def test_a_waiter_ahead_of_its_run_sleeps_through_earlier_events() -> None:
    run = make_claimed_run(runner_id="r1")  # its last event is seq 1
    woke: list[bool] = []

    def waiter() -> None:
        try:
            woke.append(wait_for_event(run_id=run.id, after_seq=2, timeout_s=10))
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)
    append_log(run.id)  # seq 2: notified, but not past the waiter's seq
    thread.join(timeout=0.5)
    slept_through = thread.is_alive()
    append_log(run.id)  # seq 3
    thread.join(timeout=5)
    assert slept_through
    assert woke == [True]


@pytest.mark.django_db(transaction=True)
def test_an_append_while_the_listener_is_cut_off_still_wakes_its_waiter() -> None:
    """A lost notification costs the listener a query on reconnecting, never the event."""
    run = make_claimed_run(runner_id="r1")
    woke: list[bool] = []

    def waiter() -> None:
        try:
            woke.append(wait_for_event(run_id=run.id, after_seq=1, timeout_s=15))
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.5)
    first = listener_pid()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])
    append_log(run.id)  # the listener reconnects only after RECONNECT_S
    thread.join(timeout=10)
    assert woke == [True]
    assert listener_pid() not in (None, first)


@pytest.mark.django_db(transaction=True)
def test_http_long_polls_give_back_their_connection_while_they_wait() -> None:
    runs = [make_claimed_run(runner_id="r1") for _ in range(20)]
    secret = issue_api_key(tenant_id="tenant-a", role="client").secret
    pages: dict[str, dict] = {}

    def poll(run_id: str) -> None:
        try:
            pages[run_id] = (
                api_client(secret)
                .get(f"/api/v1/runs/{run_id}/events", {"after_seq": 1, "wait": 20})
                .json()
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=poll, args=(run.id,)) for run in runs]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    waiting = settles_at_most(settings.AGENTRUN_DB_POOL_SIZE + 2, within_s=10)
    lent = wait_lent_at_most(1, within_s=10)
    still_waiting = sum(thread.is_alive() for thread in threads)
    for run in runs:
        append_log(run.id)
    for thread in threads:
        thread.join(timeout=30)
    # The pool keeps what it lent open, but none is lent out while 20 requests wait: this
    # thread's (if any) and the listener's are all that are in use.
    assert (still_waiting, lent <= 1) == (20, True), (waiting, lent)
    assert waiting <= settings.AGENTRUN_DB_POOL_SIZE + 2
    assert {run_id: [e["seq"] for e in page["items"]] for run_id, page in pages.items()} == {
        run.id: [2] for run in runs
    }


@pytest.mark.django_db(transaction=True)
def test_a_notification_without_a_seq_wakes_its_waiter_after_a_check() -> None:
    """Appends notify `<run id>:<last seq>` and the listener trusts the seq; a bare run id
    (a writer that does not say how far the run got) makes it read the run's last seq."""
    run = make_claimed_run(runner_id="r1")  # its last event is seq 1
    woke: list[bool] = []

    def waiter() -> None:
        try:
            woke.append(wait_for_event(run_id=run.id, after_seq=1, timeout_s=10))
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)
    with connection.cursor() as cursor:  # seq 2 committed, then a bare notification
        cursor.execute(
            "INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at)"
            " VALUES ('evt_bare', %s, 2, 'log', '{}', now())",
            [run.id],
        )
        cursor.execute("SELECT pg_notify('agentrun_run_change', %s)", [run.id])
    thread.join(timeout=5)
    assert woke == [True]
