"""The app role's server-side limits: `statement_timeout` and
`idle_in_transaction_session_timeout` come from the settings (env-configurable), apply to
every app connection (the LISTEN connection of long-polls too), end an idle transaction,
and leave long-polls alone: a long-poll waits outside any statement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.faults.harness import child_env

pytestmark = pytest.mark.django_db(transaction=True)


def _show(cursor: object, name: str) -> str:
    cursor.execute(f"SHOW {name}")  # type: ignore[attr-defined]  # fixed names below
    return str(cursor.fetchone()[0])  # type: ignore[attr-defined]


def test_app_connections_carry_the_configured_timeouts() -> None:
    assert settings.AGENTRUN_DB_STATEMENT_TIMEOUT_MS == 60_000
    assert settings.AGENTRUN_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS == 30_000
    with connection.cursor() as cursor:
        assert _show(cursor, "statement_timeout") == "1min"
        assert _show(cursor, "idle_in_transaction_session_timeout") == "30s"
    # The long-poll listener (runs/waiting.py) connects with these same parameters, in
    # autocommit: it never sits idle in a transaction while it waits.
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(**params, autocommit=True) as listener, listener.cursor() as cursor:
        assert _show(cursor, "statement_timeout") == "1min"
        assert _show(cursor, "idle_in_transaction_session_timeout") == "30s"


CHILD = """
import os, sys, time, threading, django
django.setup()
from django.db import connection, transaction
from runs.waiting import wait_for_event
from tests.builders import make_run
from runs.services.lifecycle import claim_run
from runs.services.event_log import NewEvent, append_runner_events

run = claim_run(run_id=make_run().id, runner_id="r", lease_ms=60000)
started = time.monotonic()
assert wait_for_event(run_id=run.id, after_seq=99, timeout_s=2.0) is False
waited = time.monotonic() - started
def later():
    time.sleep(1.2)
    append_runner_events(run_id=run.id, runner_id="r", lease_epoch=1, events=[NewEvent("log", {})])
threading.Thread(target=later).start()
woke = wait_for_event(run_id=run.id, after_seq=1, timeout_s=5.0)
try:
    with transaction.atomic():
        connection.cursor().execute("SELECT 1")
        time.sleep(1.5)  # idle in the transaction, past its 0.8 s limit
        connection.cursor().execute("SELECT 1")
    ended = "no"
except Exception as error:  # Django's OperationalError, or psycopg's at the rollback
    ended = "yes: " + type(error).__name__ + ": " + str(error).splitlines()[0]
print(f"long-poll waited {waited:.1f}s, woke: {woke}; idle transaction ended: {ended}")
"""


def test_long_polls_outlive_a_short_statement_timeout_and_idle_transactions_end(
    tmp_path: Path,
) -> None:
    env = child_env(
        tmp_path,
        "fault-timeouts",
        AGENTRUN_DB_STATEMENT_TIMEOUT_MS="500",
        AGENTRUN_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS="800",
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]
    print(f"\nwith statement_timeout 500 ms, idle-in-transaction 800 ms: {line}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "woke: True" in line and "idle transaction ended: yes" in line
    assert "waited 2." in line  # the whole 2 s wait, four times the statement timeout
