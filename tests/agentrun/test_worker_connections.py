"""A Celery worker thread keeps its database connection from task to task
(`agentrun.worker_connections`), but never one the server ended, one with a transaction
open, one that saw an error, or one past its age: those are closed between tasks, and the
next task gets a fresh one. `release_task_connections` is what the worker runs before and
after each task; here it is called the same way, on this thread's connection."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from celery.fixups.django import DjangoFixup
from django.db import DatabaseError, connection
from django.db.backends.signals import connection_created
from psycopg import pq

from agentrun import worker_connections
from agentrun.celery import app
from agentrun.worker_connections import release_task_connections

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def stamped() -> Iterator[None]:
    """As in a worker: connections are stamped when opened (this one is reopened)."""
    connection_created.connect(worker_connections._stamp, dispatch_uid="test-stamp")
    connection.close()
    yield
    connection_created.disconnect(dispatch_uid="test-stamp")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid: int = cursor.fetchone()[0]
    return pid


def between_tasks() -> None:
    release_task_connections()  # the task's postrun; the next task's prerun runs it again


def test_a_connection_is_kept_from_one_task_to_the_next() -> None:
    first = backend_pid()
    between_tasks()
    assert connection.connection is not None
    assert backend_pid() == first
    between_tasks()
    assert backend_pid() == first


def test_a_connection_the_server_ended_is_replaced_before_the_next_task_uses_it() -> None:
    first = backend_pid()
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [first])
    time.sleep(0.2)  # the FATAL message and the close reach the socket
    between_tasks()
    assert connection.connection is None  # closed between the tasks, not in the next one
    assert backend_pid() != first


def test_a_transaction_a_task_left_open_on_the_server_is_not_carried_over() -> None:
    first = backend_pid()
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")  # raw, behind Django's back: Django still says autocommit
        cursor.execute("SELECT txid_current()")
    assert connection.connection.info.transaction_status == pq.TransactionStatus.INTRANS
    between_tasks()
    second = backend_pid()
    assert second != first
    assert connection.connection.info.transaction_status == pq.TransactionStatus.IDLE
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [first])
        assert cursor.fetchone()[0] == 0  # the old session is gone, with its transaction


def test_a_connection_left_out_of_autocommit_is_not_carried_over() -> None:
    first = backend_pid()
    connection.set_autocommit(False)
    backend_pid()  # a transaction is open now
    between_tasks()
    assert connection.get_autocommit()
    assert backend_pid() != first


def test_a_connection_that_saw_an_error_is_dropped() -> None:
    """An error may leave session state behind (a session advisory lock whose unlock
    failed): the connection is not proven clean, so it is not reused."""
    first = backend_pid()
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM agentrun_runs")
    between_tasks()
    assert backend_pid() != first


def test_a_connection_past_its_age_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    first = backend_pid()
    between_tasks()
    assert backend_pid() == first
    monkeypatch.setattr(worker_connections, "MAX_AGE_S", 0.0)
    between_tasks()
    assert backend_pid() != first


def test_install_replaces_the_django_fixups_close_after_every_task() -> None:
    (fixup,) = [f for f in app._fixups if isinstance(f, DjangoFixup)]
    worker_fixup = fixup.worker_fixup
    try:
        worker_connections.install(app)
        assert worker_fixup.close_database is release_task_connections
    finally:
        vars(worker_fixup).pop("close_database", None)
        connection_created.disconnect(dispatch_uid=worker_connections._OPENED_AT)
