"""Statements per runner append, pinned (bench cell 1 measures the same path).

A runner's batch is four round trips whatever the batch size: BEGIN, the run lock, one
event statement (`runs.sql.insert_events`: last seq, INSERT, session touch) and one
string that is the COMMIT and, after it in a transaction of its own, the NOTIFY
(`runs.sql.commit_and_notify_runs_changed`). Django then logs its own COMMIT, which psycopg
does not send (the transaction already ended). Before issue 18 it was seven, the NOTIFY
inside the transaction (where it serialised every appender's commit); until its sixth
round the NOTIFY was a fifth round trip after the COMMIT. The outbox adds no statement:
its key lock, sequence values and INSERT are CTEs of the event statement
(`outbox.locks.records_ctes`), and the webhook-delivery INSERT … SELECT (issue 21) is made
only when the event statement found an endpoint that could match
(`tests/runs/test_append_webhook_check.py`).
"""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from psycopg._connection_base import BaseConnection

from runs import sql as runs_sql
from runs.locks import APPEND_READS, lock_run_for_append, lock_runs
from runs.models import Event, Run
from runs.services import event_log
from runs.services.event_log import NewEvent, append_runner_events
from runs.services.lifecycle import claim_run
from sessions.models import Session
from tests.builders import make_run

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(session_id: str | None) -> Run:
    ref = {"session_id": session_id, "metadata": {}} if session_id else None
    run = make_run(session_ref=ref)
    return claim_run(run_id=run.id, runner_id="runner-1", lease_ms=60_000)


def append(run: Run, count: int) -> tuple[list[str], list[bytes]]:
    """The statements Django logged, and the commands psycopg sent on its own (BEGIN,
    COMMIT, ROLLBACK: `_exec_command`)."""
    events = [NewEvent("log", {"stream": "stdout", "message": f"line {n}"}) for n in range(count)]
    sent: list[bytes] = []
    real = BaseConnection._exec_command

    def exec_command(self: BaseConnection, command: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(bytes(command))
        return real(self, command, *args, **kwargs)

    with (
        patch.object(BaseConnection, "_exec_command", exec_command),
        CaptureQueriesContext(connection) as captured,
    ):
        append_runner_events(
            run_id=run.id, runner_id="runner-1", lease_epoch=run.lease_epoch, events=events
        )
    return [query["sql"] for query in captured.captured_queries], sent


@pytest.mark.parametrize("count", [1, 100])
@pytest.mark.parametrize("session_id", [None, "s-append"])
def test_a_runner_append_is_four_round_trips_the_commit_and_notify_one(
    count: int, session_id: str | None
) -> None:
    run = claimed(session_id)
    before = Event.objects.filter(run=run).count()
    sqls, sent = append(run, count)
    assert len(sqls) == 5, sqls
    assert sqls[0] == "BEGIN" and sqls[1].endswith("FOR UPDATE")
    assert sqls[2].startswith("WITH base") and "pg_notify" not in sqls[2]
    assert sqls[3].startswith("COMMIT;\n") and "pg_notify" in sqls[3]
    assert "synchronous_commit" in sqls[3]
    assert sqls[4] == "COMMIT"  # Django's log of its commit, which sends nothing:
    assert sent == [b"BEGIN"]  # psycopg sent no COMMIT of its own
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, before + count + 1))
    if session_id:
        assert Session.objects.get(pk=session_id).last_event_seq == before + count


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
    broken = "COMMIT;\nSELECT %s::int, %s::int"
    with patch.object(runs_sql, "_COMMIT_AND_NOTIFY_SQL", broken):
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
    assert len(again) == 5


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
