"""Schema fidelity with the seed (issue 17, item 10): the keyed turn replay walks indexes,
the seed's indexes and database defaults exist, and foreign keys act in the database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from runs.models import Command, Run
from tests import builders

pytestmark = pytest.mark.django_db


def _sql(statement: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.fetchall() if cursor.description else []


def test_keyed_turn_replay_uses_indexes_with_20000_commands() -> None:
    """The replay lookup of a keyed session turn (sessions/services/admission.py
    `_replay_by_key`) on a table of 20,000 commands over 2,000 session runs: no sequential
    scan of agentrun_commands (before the seed's agentrun_runs_session_idx it hash-joined a
    scan of every command)."""
    template = builders.make_run()
    runs = [
        Run(
            id=f"run_x{n:05d}",
            tenant_id="tenant-a",
            project_id="proj-1",
            workspace_ref={"path": "/w"},
            session_ref={"session_id": f"sess_{n:05d}"},
            provider_id="openai",
            backend_profile=template.backend_profile,
            execution_policy={},
        )
        for n in range(2_000)
    ]
    Run.objects.bulk_create(runs, batch_size=1_000)
    commands = [
        Command(
            id=f"cmd_x{n:06d}",
            run=runs[n % len(runs)],
            seq=n // len(runs) + 1,
            type="turn",
            payload={"text": "hi"},
            payload_hash="sha256:x",
            idempotency_key=f"key-{n}",
        )
        for n in range(20_000)
    ]
    Command.objects.bulk_create(commands, batch_size=2_000)
    _sql("ANALYZE agentrun_runs")
    _sql("ANALYZE agentrun_commands")

    replay = (
        Command.objects.filter(run__session_ref__session_id="sess_00042", idempotency_key="key-42")
        .order_by("-created_at")
        .values_list("id", "run_id")
    )
    plan = replay.explain()
    assert "Seq Scan on agentrun_commands" not in plan, plan
    assert "agentrun_runs_session_idx" in plan, plan
    assert replay.first() == ("cmd_x000042", "run_x00042")


def test_seed_indexes_exist() -> None:
    definitions = dict(
        _sql(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
            [
                [
                    "agentrun_runs_session_idx",
                    "agentrun_sess_storage_pvc_idx",
                    "agentrun_sessions_version_idx",
                ]
            ],
        )
    )
    assert "(version, updated_at DESC)" in str(definitions["agentrun_sessions_version_idx"])
    assert "WHERE (storage_pvc_name IS NOT NULL)" in str(
        definitions["agentrun_sess_storage_pvc_idx"]
    )
    assert "(session_ref -> 'session_id'::text)" in str(definitions["agentrun_runs_session_idx"])


def test_a_raw_sql_writer_may_leave_defaulted_columns_out() -> None:
    """An older manager's INSERTs name only the seed's columns without defaults."""
    run_id, session_id, task_id = (f"{p}_{uuid.uuid4().hex}" for p in ("run", "sess", "qt"))
    _sql(
        "INSERT INTO agentrun_sessions (session_id, tenant_id, project_id, backend_profile,"
        " created_at, updated_at) VALUES (%s, 't', 'p', 'codex', now(), now())",
        [session_id],
    )
    _sql(
        "INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, provider_id,"
        " backend_profile, execution_policy, status, created_at, updated_at) VALUES"
        " (%s, 't', 'p', '{\"path\": \"/w\"}', 'openai', 'codex', '{}', 'pending', now(), now())",
        [run_id],
    )
    _sql(
        "INSERT INTO agentrun_commands (id, run_id, seq, type, payload, payload_hash, state,"
        " created_at, updated_at) VALUES ('cmd_' || %s, %s, 1, 'turn', '{}', 'h', 'pending',"
        " now(), now())",
        [run_id, run_id],
    )
    _sql(
        "INSERT INTO agentrun_leases (run_id, runner_id, lease_expires_at, updated_at)"
        " VALUES (%s, 'r', now(), now())",
        [run_id],
    )
    _sql(
        "INSERT INTO agentrun_runners (id, registered_at, heartbeat_at) VALUES (%s, now(), now())",
        [f"runner_{run_id}"],
    )
    _sql(
        "INSERT INTO agentrun_backends (profile, capabilities, capacity, health, updated_at)"
        " VALUES (%s, '{}', '{}', '{}', now())",
        [f"profile-{run_id}"],
    )
    _sql(
        "INSERT INTO agentrun_cancel_requests (id, target_kind, target_id, run_id, reason, epoch,"
        " stage, created_at, updated_at) VALUES ('cancel_' || %s, 'run', %s, %s, 'r', 1,"
        " 'accepted', now(), now())",
        [run_id, run_id, run_id],
    )
    _sql(
        "INSERT INTO agentrun_queue_tasks (id, tenant_id, project_id, queue, lane, title,"
        " priority, state, version, backend_profile, payload, payload_hash, created_at,"
        " updated_at) VALUES (%s, 't', 'p', 'q', 'l', 'x', 0, 'pending', 1, 'codex', '{}', 'h',"
        " now(), now())",
        [task_id],
    )
    session = _sql(
        "SELECT version, execution_state, last_event_seq, summary::text, metadata::text,"
        " storage_kind, codex_rollout_subdir FROM agentrun_sessions WHERE session_id = %s",
        [session_id],
    )
    assert session == [(1, "idle", 0, "{}", "{}", "none", "sessions")]
    assert _sql("SELECT cancel_epoch, lease_epoch FROM agentrun_runs WHERE id = %s", [run_id]) == [
        (0, 0)
    ]
    assert _sql("SELECT cancel_epoch FROM agentrun_commands WHERE run_id = %s", [run_id]) == [(0,)]
    assert _sql("SELECT lease_epoch FROM agentrun_leases WHERE run_id = %s", [run_id]) == [(0,)]
    assert _sql(
        "SELECT references_json::text, metadata::text FROM agentrun_queue_tasks WHERE id = %s",
        [task_id],
    ) == [("[]", "{}")]
    assert _sql(
        "SELECT policy_ceiling::text FROM agentrun_backends WHERE profile = %s",
        [f"profile-{run_id}"],
    ) == [("{}",)]


def test_foreign_keys_act_in_the_database() -> None:
    """A raw DELETE (no ORM collector) cascades as the seed's keys do, and a deleted command
    leaves its cancel request with `command_id` NULL."""
    run = builders.make_run()
    command = Command.objects.create(
        id=f"cmd_{uuid.uuid4().hex}", run=run, seq=1, type="turn", payload={}, payload_hash="h"
    )
    _sql(
        "INSERT INTO agentrun_cancel_requests (id, target_kind, target_id, run_id, command_id,"
        " reason, epoch, stage, created_at, updated_at) VALUES ('cancel_fk', 'command', %s, %s,"
        " %s, 'r', 1, 'accepted', now(), now())",
        [command.id, run.id, command.id],
    )
    _sql("DELETE FROM agentrun_commands WHERE id = %s", [command.id])
    assert _sql("SELECT command_id FROM agentrun_cancel_requests WHERE id = 'cancel_fk'") == [
        (None,)
    ]
    _sql("DELETE FROM agentrun_runs WHERE id = %s", [run.id])
    for table in ("agentrun_events", "agentrun_commands", "agentrun_cancel_requests"):
        count = f"SELECT count(*) FROM {table} WHERE run_id = %s"  # noqa: S608 (fixed names)
        assert _sql(count, [run.id]) == [(0,)]
