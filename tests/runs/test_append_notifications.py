"""The after-commit notifications of an append: the run change always, and with the Kafka
outbox on, one `agentrun_outbox_committed` per partition key that got records, in the same
statement (a relay that LISTENs claims on it instead of waiting for a Celery wake-up)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings as SettingsWrapper

from outbox.cloudevents import partition_key_for
from runs.sql import OUTBOX_COMMIT_CHANNEL, RUN_CHANGE_CHANNEL
from tests.outbox.builders import append_logs, claimed_run

pytestmark = pytest.mark.django_db(transaction=True)


def listening() -> psycopg.Connection:
    params = connection.get_connection_params()
    listener = psycopg.connect(**params, autocommit=True)
    listener.execute(f"LISTEN {RUN_CHANGE_CHANNEL}")
    listener.execute(f"LISTEN {OUTBOX_COMMIT_CHANNEL}")
    return listener


def received(listener: psycopg.Connection, count: int) -> list[tuple[str, str]]:
    """The next `count` notifications (each arrives before the append returns)."""
    got = [(n.channel, n.payload) for n in listener.notifies(timeout=30, stop_after=count)]
    assert len(got) == count, got
    return got


def test_with_the_outbox_on_the_relay_is_notified_after_commit(
    settings: SettingsWrapper,
) -> None:
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:1"  # recording never connects
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    run = claimed_run(tenant_id="tenant-n", session_id="s-notify")
    with listening() as listener:
        with CaptureQueriesContext(connection) as captured:
            appended = append_logs(run, 3)
        got = received(listener, 2)
    assert (RUN_CHANGE_CHANNEL, f"{run.id}:{appended[-1].seq}:s-notify") in got
    assert (OUTBOX_COMMIT_CHANNEL, partition_key_for(run)) in got
    # One after-commit statement carries both (the runner's append's, prepared from a
    # connection's second on: tests/runs/test_append_statements.py).
    sqls = [query["sql"] for query in captured.captured_queries]
    assert sum("pg_notify" in sql or "EXECUTE run_change_notify_" in sql for sql in sqls) == 1


def test_with_the_outbox_off_only_the_run_change_is_sent(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = ""
    run = claimed_run(tenant_id="tenant-n")
    with listening() as listener:
        appended = append_logs(run, 1)
        # A second append's notification proves no outbox one came between the two.
        later = append_logs(run, 1)
        got = received(listener, 2)
    assert got == [
        (RUN_CHANGE_CHANNEL, f"{run.id}:{appended[-1].seq}"),
        (RUN_CHANGE_CHANNEL, f"{run.id}:{later[-1].seq}"),
    ]
