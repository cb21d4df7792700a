"""A runner's append sends its statements on the psycopg connection, past Django's cursor
wrapper (`agentrun.prepared_sql.execute_hot`; bench cell 1, issue 18, eighth round), and keeps
what of Django's cursor matters: its error translation, its refusal inside a broken
transaction, its query log and its execution wrappers (both then see every statement).
The round trips themselves are pinned by tests/runs/test_append_statements.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest.mock import patch

import psycopg
import pytest
from django.db import DEFAULT_DB_ALIAS, DataError, connection, connections, transaction
from django.db.backends.utils import CursorWrapper
from django.db.transaction import TransactionManagementError

from agentrun import prepared_sql
from runs.models import Event, Run
from runs.services.event_log import NewEvent, append_runner_events
from runs.services.lifecycle import claim_run
from tests.builders import make_run

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(session_id: str) -> Run:
    run = make_run(session_ref={"session_id": session_id, "metadata": {}})
    return claim_run(run_id=run.id, runner_id="runner-1", lease_ms=60_000)


def append(run: Run) -> None:
    append_runner_events(
        run_id=run.id,
        runner_id="runner-1",
        lease_epoch=run.lease_epoch,
        events=[NewEvent("log", {"stream": "stdout", "message": "line"})],
    )


def spy(target: Any, name: str, seen: list[str]) -> Any:
    real = getattr(target, name)

    def spying(self: Any, sql: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(sql))
        return real(self, sql, *args, **kwargs)

    return patch.object(target, name, spying)


def test_a_runner_append_sends_its_three_statements_past_djangos_cursor() -> None:
    run = claimed("s-raw-path")
    connection.close()  # a new connection: first, prepared and executed appends
    connection.ensure_connection()  # (its time zone set, by Django's cursor)
    django_sent: list[str] = []
    psycopg_sent: list[str] = []
    with (
        spy(CursorWrapper, "execute", django_sent),
        spy(psycopg.ClientCursor, "execute", psycopg_sent),
    ):
        for _ in range(3):
            append(run)
    assert django_sent == []
    assert len(psycopg_sent) == 9, psycopg_sent
    assert all(sql.startswith("BEGIN;\n") for sql in psycopg_sent[0::3])
    assert all(sql.startswith("COMMIT;\n") for sql in psycopg_sent[2::3])
    assert Event.objects.filter(run=run, type="log").count() == 3


def test_an_execution_wrapper_sees_every_statement_of_the_append() -> None:
    run = claimed("s-wrapped")
    append(run)
    seen: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        seen.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(wrapper):
        append(run)
    assert len(seen) == 3, seen
    assert seen[0].startswith("BEGIN;\n") and seen[2].startswith("COMMIT;\n")


def test_a_failure_is_djangos_error_and_a_broken_transaction_is_refused() -> None:
    db = prepared_sql.default_connection()
    statement = prepared_sql.prepared("test_division", "SELECT 1 / %s::int")
    with pytest.raises(DataError), transaction.atomic():  # psycopg's, translated
        prepared_sql.execute_hot(db, statement, [0])
    assert prepared_sql.execute_hot(db, statement, [1]) == [(1,)]
    with transaction.atomic():
        transaction.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            prepared_sql.execute_hot(db, statement, [1])


def test_the_hot_path_starts_again_on_a_new_connection() -> None:
    statement = prepared_sql.prepared("test_reconnect", "SELECT %s::int + 1")
    db = prepared_sql.default_connection()
    for _ in range(3):
        assert prepared_sql.execute_hot(db, statement, [1]) == [(2,)]  # prepared by now
    connection.close()
    sent: list[str] = []
    with spy(psycopg.ClientCursor, "execute", sent):
        assert prepared_sql.execute_hot(db, statement, [2]) == [(3,)]
    assert sent[-1] == "SELECT %s::int + 1"  # as it is: nothing prepared on this connection


def test_named_parameters_are_sent_by_position_to_the_execute() -> None:
    statement = prepared_sql.prepared("test_named", "SELECT %(b)s::int - %(a)s::int, %(a)s::int")
    assert statement.execute_sql.endswith("(%s, %s)") and statement.keys == ("b", "a")
    db = prepared_sql.default_connection()
    sent: list[str] = []
    with spy(psycopg.ClientCursor, "execute", sent):
        results = [prepared_sql.execute_hot(db, statement, {"a": 1, "b": 5}) for _ in range(3)]
    assert results == [[(4, 1)]] * 3
    assert sent[0].startswith("SELECT") and sent[2].startswith("EXECUTE test_named_")


def test_what_is_prepared_follows_the_psycopg_connection_lent_to_another_thread() -> None:
    # A pool lends one psycopg connection to one Django connection after another: the
    # statements prepared on it stay prepared (a second PREPARE of the name would fail).
    statement = prepared_sql.prepared("test_lent", "SELECT %s::int * 2")
    db = prepared_sql.default_connection()
    for _ in range(2):
        prepared_sql.execute_hot(db, statement, [1])  # prepared on this psycopg connection
    other = connections.create_connection(DEFAULT_DB_ALIAS)  # another thread's
    other.connection = db.connection  # lent the same psycopg connection
    sent: list[str] = []
    try:
        with spy(psycopg.ClientCursor, "execute", sent):
            assert prepared_sql.execute_hot(other, statement, [4]) == [(8,)]
    finally:
        other.connection = None  # still `db`'s to close
    assert sent[-1].startswith("EXECUTE test_lent_")
