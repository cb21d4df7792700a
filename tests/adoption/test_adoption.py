"""Adopting an original agentrun database in place (issue 17): a database built by the
original's migrations 001-011 and 014 and filled with its rows, then plain `manage.py
migrate` in a subprocess; afterwards the real server lists and reads all of it, an old
idempotency key replays, a new turn in the old session is admitted, event seqs and
versions continue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from agentrun.settings import BASE_DIR
from tests.adoption import original
from tests.runtime.server import Server, serving

pytestmark = pytest.mark.django_db

# Only an adopted database has these: the original's record and the conversion's progress.
ADOPTION_ONLY = ("agentrun_schema_migrations", "agentrun_adoption_progress")


def manage(url: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def adopted() -> Iterator[tuple[str, str]]:
    """(database URL, migrate's output) of the original database after `migrate`."""
    with original.scratch_database() as url:
        original.build(url)
        yield url, manage(url, "migrate", "--no-input")


def query(url: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as db:
        return db.execute(sql, params or []).fetchall()


CATALOG = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE a.attnum > 0 AND NOT a.attisdropped""",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
        WHERE connamespace = 'public'::regnamespace AND contype <> 'n'""",
}


def catalog(rows: list[tuple[Any, ...]]) -> set[tuple[Any, ...]]:
    return {row for row in rows if row[0] not in ADOPTION_ONLY}


def test_migrate_adopts_the_schema_exactly(adopted: tuple[str, str]) -> None:
    """Every table, column (type, nullability, default), index and constraint of the
    adopted database is what our migrations make on a fresh database (the test
    database), and nothing of the original's is left over."""
    url, output = adopted
    assert "Adopted the original's tables of runs in place." in output
    assert "adopted agentrun_events" in output
    assert_same_schema_as_fresh(url)


def assert_same_schema_as_fresh(url: str) -> None:
    for name, sql in CATALOG.items():
        with connection.cursor() as cursor:
            cursor.execute(sql)
            fresh = catalog(cursor.fetchall())
        mine = catalog(query(url, sql))
        assert (mine - fresh, fresh - mine) == (set(), set()), name


def test_migrate_again_changes_nothing(adopted: tuple[str, str]) -> None:
    url, _ = adopted
    again = manage(url, "migrate", "--no-input")
    assert "No migrations to apply." in again and "Adopted" not in again, again


def test_the_original_dispatch_and_outbox_tables_are_adopted_too() -> None:
    """A database that also ran the original's 012, 013 and 015 (DDL reconstructed from the
    seed's queries): dispatch's and outbox's initial migrations are adopted after `runs`
    0002 they depend on, their rows kept and converted, the outbox sequence continues."""
    with original.scratch_database("_v02") as url:
        original.build(url, with_v02=True)
        output = manage(url, "migrate", "--no-input")
        for label in ("runs", "dispatch", "outbox"):
            assert f"Adopted the original's tables of {label} in place." in output, output
        assert_same_schema_as_fresh(url)
        intent = query(
            url, "SELECT input, input_hash, last_error FROM agentrun_runner_dispatch_intents"
        )
        assert intent[0][0] == {"launch_profile": "default"} and intent[0][1].startswith("sha256:")
        assert intent[0][2] == {"failure_kind": "infra-failed"}
        assert query(url, "SELECT nextval('agentrun_kafka_event_outbox_seq')")[0][0] > 42


def test_two_migrates_at_once_adopt_once() -> None:
    """Two `migrate` processes started together on one original database (two pods): both
    succeed and exactly one adopts it; the other waits its turn and finds nothing to do."""
    with original.scratch_database("_race") as url:
        original.build(url)
        env = {**os.environ, "DATABASE_URL": url}
        processes = [
            subprocess.Popen(
                [sys.executable, "manage.py", "migrate", "--no-input"],
                cwd=BASE_DIR,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [process.communicate(timeout=300)[0] for process in processes]
        assert [process.returncode for process in processes] == [0, 0], outputs
        adopting = [out for out in outputs if "Adopted the original's tables of runs" in out]
        assert len(adopting) == 1, outputs
        assert_same_schema_as_fresh(url)


def test_json_keys_hashes_and_sequences_are_converted(adopted: tuple[str, str]) -> None:
    url, _ = adopted
    assert query(
        url, "SELECT session_ref, trace_sink FROM agentrun_runs WHERE id = 'run_old1'"
    ) == [
        ({"session_id": "sess_old1", "conversation_id": None, "metadata": {}}, {"trace_id": "tr-1"})
    ]
    assert query(url, "SELECT payload FROM agentrun_events WHERE id = 'evt_run_old2_3'") == [
        (
            {
                "status": "cancelled",
                "command_id": "cmd_old2",
                "cancel_request_id": "cancel_old1",
                "cancel_epoch": 1,
            },
        )
    ]
    (latest,) = query(url, "SELECT latest_attempt FROM agentrun_queue_tasks WHERE id = 'qt_old1'")[
        0
    ]
    assert latest["attempt_id"] == "qa_old2" and latest["retry_index"] == 1
    (commands,) = query(
        url, "SELECT count(*) FROM agentrun_commands WHERE payload_hash NOT LIKE 'sha256:%%'"
    )[0]
    assert commands == 0
    # The task's attempts carry the task's recomputed hash.
    assert query(
        url,
        "SELECT count(*) FROM agentrun_queue_attempts a JOIN agentrun_queue_tasks t"
        " ON t.id = a.task_id WHERE a.payload_hash <> t.payload_hash",
    ) == [(0,)]
    assert query(url, "SELECT nextval('agentrun_session_version_seq')")[0][0] > 7
    assert query(url, "SELECT nextval('agentrun_queue_version_seq')")[0][0] > 5
    assert query(url, "SELECT bool_and(done) FROM agentrun_adoption_progress") == [(True,)]


def test_conversion_resumes_after_an_interruption(adopted: tuple[str, str]) -> None:
    """Batches commit one by one with their position: a conversion stopped after three
    batches of two rows leaves the rest for the next run, which finishes it."""
    url, _ = adopted
    with psycopg.connect(url) as db:
        db.execute(
            "UPDATE agentrun_events SET payload = (payload - 'command_id')"
            " || jsonb_build_object('commandId', payload -> 'command_id')"
            " WHERE run_id IN ('run_old1', 'run_old2') AND payload ? 'command_id'"
        )
        db.execute("UPDATE agentrun_adoption_progress SET done = false, last_key = ''")
    stopped = manage(url, "adopt_database", "--batch-size", "2", "--max-batches", "3")
    assert "Stopped early" in stopped
    progress = dict(
        query(url, "SELECT step, last_key FROM agentrun_adoption_progress WHERE NOT done")
    )
    assert progress["runs"] == "run_old5" and progress["events"] == ""  # 3 batches: 2 + 2 + 1
    status = manage(url, "adopt_database", "--status")
    assert "events: after ''" in status
    assert "Converted." in manage(url, "adopt_database", "--batch-size", "2")
    assert query(url, "SELECT count(*) FROM agentrun_events WHERE payload ? 'commandId'") == [(0,)]
    assert "events: done" in manage(url, "adopt_database", "--status")
    assert "Nothing to convert." in manage(url, "adopt_database")


@pytest.fixture(scope="module")
def server(adopted: tuple[str, str]) -> Iterator[tuple[Server, dict[str, str]]]:
    url, _ = adopted
    key = json.loads(
        manage(url, "create_api_key", "--tenant", "tenant-a", "--role", "client", "--json")
    )
    with serving(DATABASE_URL=url) as running:
        yield running, {"Authorization": f"Bearer {key['key']}", "Content-Type": "application/json"}


def call(
    server: tuple[Server, dict[str, str]], method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    running, headers = server
    data = json.dumps(body).encode() if body is not None else None
    reply = running.request(method, f"/api/v1/{path}", body=data, headers=headers)
    return reply.status, reply.json()


def test_the_api_lists_and_reads_the_adopted_rows(server: tuple[Server, dict[str, str]]) -> None:
    status, runs = call(server, "GET", "runs")
    assert status == 200, runs
    assert {"run_old1", "run_old2", "run_old3", "run_old4", "run_old5"} <= {
        item["id"] for item in runs["items"]
    }
    status, cancelled = call(server, "GET", "runs/run_old2")
    assert status == 200 and cancelled["status"] == "cancelled", cancelled
    assert cancelled["cancel_request_id"] == "cancel_old1"
    status, events = call(server, "GET", "runs/run_old1/events")
    assert status == 200, events
    assert [e["seq"] for e in events["items"]] == [1, 2, 3, 4]
    assert events["items"][1]["payload"] == {"text": "hello there", "command_id": "cmd_old1"}
    status, commands = call(server, "GET", "runs/run_old1/commands")
    assert status == 200 and commands["items"][0]["idempotency_key"] == "turn-key-1", commands
    status, sessions = call(server, "GET", "sessions")
    assert status == 200 and "sess_old1" in {s["session_id"] for s in sessions["items"]}, sessions
    status, session = call(server, "GET", "sessions/sess_old1")
    assert status == 200 and session["last_run_id"] == "run_old1", session
    status, tasks = call(server, "GET", "queue/tasks")
    assert status == 200 and {"qt_old1", "qt_old2"} <= {t["id"] for t in tasks["items"]}, tasks
    status, attempts = call(server, "GET", "queue/tasks/qt_old1/attempts")
    assert status == 200, attempts
    assert {a["attempt_id"] for a in attempts["items"]} == {"qa_old1", "qa_old2"}


TURN = {
    # The stored run's trace sink was `{"traceId": …}`: the replay matches the converted key.
    "run": {**original.SPEC, "trace_sink": {"trace_id": "tr-1"}},
    "command": {
        "payload": {"text": "hello there"},
        "idempotency_key": "turn-key-1",
        "dispatch": None,
    },
}


def test_an_old_idempotency_key_replays(server: tuple[Server, dict[str, str]]) -> None:
    status, replay = call(server, "POST", "sessions/sess_old1/turns", TURN)
    assert status == 200, replay
    assert replay["command"]["id"] == "cmd_old1"
    status, task = call(
        server, "POST", "queue/tasks", {**original.TASK, "idempotency_key": "task-key-1"}
    )
    assert status == 200 and task["id"] == "qt_old1", task


def test_a_new_turn_in_the_old_session_is_admitted(server: tuple[Server, dict[str, str]]) -> None:
    new_turn = {
        **TURN,
        "command": {
            "payload": {"text": "and now?"},
            "idempotency_key": "turn-key-2",
            "dispatch": None,
        },
    }
    status, admitted = call(server, "POST", "sessions/sess_old1/turns", new_turn)
    assert status == 201, admitted
    assert admitted["run"]["id"] != "run_old1"
    status, session = call(server, "GET", "sessions/sess_old1")
    assert session["active_run_id"] == admitted["run"]["id"] and session["version"] > 7, session


def test_event_seqs_and_versions_continue(server: tuple[Server, dict[str, str]]) -> None:
    status, created = call(
        server, "POST", "runs/run_old5/commands", {"type": "steer", "payload": {"text": "more"}}
    )
    assert status == 201, created
    status, events = call(server, "GET", "runs/run_old5/events")
    seqs = [e["seq"] for e in events["items"]]
    # The original's two events, then the steer's (its user_message first), no gap.
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 2, seqs
    assert events["items"][2]["type"] == "user_message", events
    status, cancelled = call(server, "POST", "queue/tasks/qt_old2/cancel", {"reason": "not needed"})
    assert status == 200, cancelled
    status, task = call(server, "GET", "queue/tasks/qt_old2")
    assert task["state"] == "cancelled" and task["version"] > 5, task
