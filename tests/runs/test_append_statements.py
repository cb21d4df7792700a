"""Statements per runner append, pinned (bench cell 1 measures the same path).

A runner's batch is three round trips whatever the batch size: the run lock with the
transaction's BEGIN in front of it (`agentrun.prepared_sql.execute_hot`), one event statement
(`runs.sql.insert_events`: last seq, INSERT, session touch) and one string that is the
COMMIT and, after it in a transaction of its own, the NOTIFY
(`runs.sql.commit_and_notify_runs_changed`). Django logs a BEGIN when its block starts and
a COMMIT at its end; psycopg sends neither (the lock's string began the transaction, the
COMMIT's ended it). The lock, the event statement and the NOTIFY's statement are prepared
on a connection's second append and EXECUTEd from its third on. Before issue 18 it was
seven round trips, the NOTIFY inside the transaction (where it serialised every appender's
commit); until its sixth round the NOTIFY was a fifth round trip after the COMMIT, until
its seventh BEGIN was a round trip of its own. The outbox adds no statement:
its key lock, sequence values and INSERT are CTEs of the event statement
(`outbox.locks.records_ctes`), and the webhook-delivery INSERT … SELECT (issue 21) is made
only when the event statement found an endpoint that could match
(`tests/runs/test_append_webhook_check.py`).
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from django.db import DataError, IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from psycopg.pq import TransactionStatus

from agentrun import prepared_sql
from agentrun.errors import AgentRunError
from runs import sql as runs_sql
from runs.locks import APPEND_READS, lock_run_for_append, lock_runs
from runs.models import Event, Run
from runs.services import event_log
from runs.services.event_log import NewEvent, append_runner_events
from runs.services.lifecycle import claim_run
from sessions.models import Session
from tests.builders import make_run
from tests.support.psycopg_commands import psycopg_commands

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(session_id: str | None) -> Run:
    ref = {"session_id": session_id, "metadata": {}} if session_id else None
    run = make_run(session_ref=ref)
    return claim_run(run_id=run.id, runner_id="runner-1", lease_ms=60_000)


def append(run: Run, count: int) -> tuple[list[str], list[bytes]]:
    """The statements Django logged, and the commands psycopg sent on its own (BEGIN,
    COMMIT, ROLLBACK: `_exec_command`)."""
    events = [NewEvent("log", {"stream": "stdout", "message": f"line {n}"}) for n in range(count)]
    with psycopg_commands() as sent, CaptureQueriesContext(connection) as captured:
        append_runner_events(
            run_id=run.id, runner_id="runner-1", lease_epoch=run.lease_epoch, events=events
        )
    return [query["sql"] for query in captured.captured_queries], sent


@pytest.mark.parametrize("count", [1, 100])
@pytest.mark.parametrize("session_id", [None, "s-append"])
def test_a_runner_append_is_three_round_trips_begin_with_the_lock(
    count: int, session_id: str | None
) -> None:
    run = claimed(session_id)
    connection.close()  # a new connection: nothing prepared on it yet
    before = Event.objects.filter(run=run).count()
    first, sent_first = append(run, count)
    second, sent_second = append(run, count)
    third, sent_third = append(run, count)
    for sqls in (first, second, third):
        assert len(sqls) == 5, sqls
        assert sqls[0] == "BEGIN" and sqls[4] == "COMMIT"  # Django's log: nothing sent
        assert sqls[1].startswith("BEGIN;\n") and "pg_notify" not in sqls[2]
        assert sqls[3].startswith("COMMIT;\n")
    assert sent_first == sent_second == sent_third == []  # no BEGIN or COMMIT of psycopg's
    # As is the first time; prepared (and run) the second; EXECUTEd from then on.
    assert first[1].endswith("FOR UPDATE") and first[2].startswith("WITH base")
    assert "\nPREPARE run_lock_" in second[1] and "FOR UPDATE;\nEXECUTE run_lock_" in second[1]
    assert second[2].startswith("SET LOCAL plan_cache_mode = force_generic_plan;\n")
    assert "\nPREPARE append_events_" in second[2] and "\nEXECUTE append_events_" in second[2]
    # The NOTIFY after the COMMIT, in its own transaction: prepared as the other two.
    assert "pg_notify" in first[3] and "synchronous_commit" in first[3]
    assert second[3].startswith("COMMIT;\nPREPARE run_change_notify_") and "pg_notify" in second[3]
    assert third[3].startswith("COMMIT;\nEXECUTE run_change_notify_") and "SELECT" not in third[3]
    assert third[1].startswith("BEGIN;\nEXECUTE run_lock_") and "SELECT" not in third[1]
    assert third[2].startswith("SET LOCAL plan_cache_mode = force_generic_plan;\n")
    assert "\nEXECUTE append_events_" in third[2] and "WITH base" not in third[2]
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, before + 3 * count + 1))
    if session_id:
        assert Session.objects.get(pk=session_id).last_event_seq == before + 3 * count


def test_the_events_statement_is_planned_once_per_connection() -> None:
    run = claimed("s-plan")
    connection.close()
    for _ in range(12):
        append(run, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY name"
        )
        plans = {name.rsplit("_", 1)[0]: (generic, custom) for name, generic, custom in cursor}
    assert plans["append_events"] == (11, 0)  # prepared by the second append
    assert plans["run_lock"][0] >= 5  # PostgreSQL's own choice: generic after five


def test_an_append_that_fails_after_its_begin_rolls_back_and_the_next_begins_again() -> None:
    run = claimed("s-fail")
    append(run, 1)
    append(run, 1)
    before = Event.objects.filter(run=run).count()

    def failing(**kwargs: Any) -> Any:
        raise RuntimeError("after the lock")

    with patch.object(event_log, "insert_events", failing), pytest.raises(RuntimeError):
        append(run, 1)
    raw = connection.connection
    assert raw.info.transaction_status == TransactionStatus.IDLE  # rolled back
    assert connection.get_autocommit() and not connection.in_atomic_block
    with pytest.raises(AgentRunError):  # a 404: the lock found nothing, the block rolls back
        append_runner_events(run_id="run-missing", runner_id="runner-1", lease_epoch=1, events=[])
    assert raw.info.transaction_status == TransactionStatus.IDLE
    assert Event.objects.filter(run=run).count() == before
    sqls, sent = append(run, 1)
    assert sqls[1].startswith("BEGIN;\nEXECUTE run_lock_") and sent == []
    assert Event.objects.filter(run=run).count() == before + 1


def test_inside_a_callers_transaction_the_lock_carries_no_begin() -> None:
    run = claimed("s-nested")
    for outer_first in (True, False):
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            if outer_first:
                Event.objects.filter(run=run).count()  # the transaction began with it
                lock_run_for_append(run.id)
            else:
                with transaction.atomic():  # a savepoint began it
                    lock_run_for_append(run.id)
        sqls = [query["sql"] for query in captured.captured_queries]
        assert not any(sql.startswith("BEGIN;") for sql in sqls), sqls


def test_a_prepare_that_fails_leaves_the_statement_unprepared_on_that_connection() -> None:
    statement = prepared_sql.prepared("test_failing", "SELECT 1 / %s::int")
    connection.close()
    db = prepared_sql.default_connection()
    with transaction.atomic():
        prepared_sql.execute_hot(db, statement, [1])  # as it is
    with pytest.raises(DataError), transaction.atomic():
        prepared_sql.execute_hot(db, statement, [0])  # PREPARE and EXECUTE: division by zero
    with CaptureQueriesContext(connection) as captured:
        assert prepared_sql.execute_hot(db, statement, [2]) == [(0,)]
    assert captured.captured_queries[0]["sql"] == "SELECT 1 / 2::int"  # never PREPAREd again


def test_the_run_lock_reads_what_the_append_reads_and_the_rest_on_access() -> None:
    run = claimed("s-light")
    with transaction.atomic():
        locked = lock_run_for_append(run.id)
        assert locked.get_deferred_fields() == {
            field.attname for field in Run._meta.concrete_fields if field.name not in APPEND_READS
        }
        assert (locked.session_id, locked.claimed_by, locked.lease_epoch) == (
            "s-light",
            "runner-1",
            run.lease_epoch,
        )
        with CaptureQueriesContext(connection) as captured:
            assert locked.execution_policy == run.execution_policy  # a deferred field
        assert len(captured) == 1


def test_a_batch_settles_run_locks_read_what_an_append_reads() -> None:
    first, second = claimed("s-batch-1"), claimed("s-batch-2")
    with transaction.atomic():
        locked = lock_runs([second.id, first.id])
        assert list(locked) == sorted([first.id, second.id])  # id order
        for run in locked.values():
            assert run.get_deferred_fields() == {
                field.attname
                for field in Run._meta.concrete_fields
                if field.name not in APPEND_READS
            }
        assert locked[first.id].session_id == "s-batch-1"


def test_a_notify_that_fails_after_the_commit_is_logged_the_append_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = claimed(None)
    # The NOTIFY statement fails (the COMMIT before it took): the events are committed,
    # so the runner gets its answer, and the failure is logged as after any commit.
    broken = "SELECT %s::int, %s::int"
    with patch.object(runs_sql, "_NOTIFY_SQL", broken):
        appended = append_runner_events(
            run_id=run.id,
            runner_id="runner-1",
            lease_epoch=run.lease_epoch,
            events=[NewEvent("log", {"message": "kept"})],
        )
    assert Event.objects.filter(pk=appended[0].id).exists()
    assert "run-change notification not sent" in caplog.text
    # The connection goes on: the next append is ordinary.
    again, _ = append(run, 1)
    assert len(again) == 5 and again[1].startswith("BEGIN;\n")


def test_a_commit_that_fails_raises_and_keeps_nothing() -> None:
    run = claimed(None)
    before = Event.objects.filter(run=run).count()
    real = event_log.commit_appends

    def violating_commit() -> None:
        # A deferred foreign key, checked at COMMIT: the COMMIT itself fails.
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at)"
                " VALUES ('evt-orphan', 'no-such-run', 1, 'log', '{}', now())"
            )
        real()

    with (
        patch.object(event_log, "commit_appends", violating_commit),
        pytest.raises(IntegrityError),
    ):
        append_runner_events(
            run_id=run.id,
            runner_id="runner-1",
            lease_epoch=run.lease_epoch,
            events=[NewEvent("log", {"message": "lost"})],
        )
    assert Event.objects.filter(run=run).count() == before
    assert not Event.objects.filter(pk="evt-orphan").exists()
