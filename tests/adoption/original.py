"""A database the way the original (TypeScript) manager leaves it: its migrations' DDL
(original_schema.sql) and seed-shaped rows, with the camelCase JSON and the payload-hash
format it wrote. Built in a scratch database of its own, never the test database."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection

SCHEMA = Path(__file__).with_name("original_schema.sql")
SCHEMA_V02 = Path(__file__).with_name("original_v02_reconstructed.sql")
T0 = "2026-06-01T10:00:00Z"
SPEC = {
    "project_id": "proj-1",
    "workspace_ref": {"path": "/work/repo"},
    "provider_id": "openai",
    "backend_profile": "codex",
    "execution_policy": {"sandbox": "workspace-write"},
}


def legacy_hash(value: Any) -> str:
    """A hash in another format than ours (no `sha256:` prefix), as an older store wrote."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def url_of(name: str) -> str:
    params = connection.settings_dict
    return f"postgres://{params['USER']}@{params['HOST']}:{params['PORT']}/{name}"


@contextmanager
def scratch_database(suffix: str = "") -> Iterator[str]:
    """A new empty database (`test_adopt_<pid><suffix>`), dropped afterwards; its URL."""
    name = f"test_adopt_{os.getpid()}{suffix}"
    with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url_of(name)
    finally:
        with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _insert(db: psycopg.Connection[Any], table: str, **values: Any) -> None:
    columns = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    params = [json.dumps(v) if isinstance(v, dict | list) else v for v in values.values()]
    db.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", params)  # noqa: S608


def _run(db: psycopg.Connection[Any], run_id: str, status: str, **extra: Any) -> None:
    _insert(
        db,
        "agentrun_runs",
        id=run_id,
        tenant_id="tenant-a",
        status=status,
        terminal_status=None if status == "pending" else status,
        created_at=T0,
        updated_at=T0,
        **SPEC,
        **extra,
    )


def _command(
    db: psycopg.Connection[Any], run_id: str, command_id: str, text: str, **extra: Any
) -> None:
    payload = {"text": text}
    _insert(
        db,
        "agentrun_commands",
        id=command_id,
        run_id=run_id,
        seq=1,
        type="turn",
        payload=payload,
        payload_hash=legacy_hash(payload),
        created_at=T0,
        updated_at=T0,
        **extra,
    )


def _events(
    db: psycopg.Connection[Any], run_id: str, *payloads: tuple[str, dict[str, Any]]
) -> None:
    for seq, (kind, payload) in enumerate(payloads, start=1):
        _insert(
            db,
            "agentrun_events",
            id=f"evt_{run_id}_{seq}",
            run_id=run_id,
            seq=seq,
            type=kind,
            payload=payload,
            created_at=T0,
        )


def build(url: str, *, with_v02: bool = False) -> None:
    """The original's schema and rows in the database at `url`; `with_v02`: also the
    dispatch intent and outbox tables of its migrations 012, 013 and 015 (reconstructed)
    with a row each."""
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(SCHEMA.read_text())
        if with_v02:
            db.execute(SCHEMA_V02.read_text())
    with psycopg.connect(url) as db:
        _session_turn(db)
        _cancelled_run(db)
        _queue(db)
        _pending_run(db)
        if with_v02:
            _dispatch_and_outbox(db)


def _dispatch_and_outbox(db: psycopg.Connection[Any]) -> None:
    """The pending run's dispatch intent, and an outbox record its sequence never handed out."""
    request = {"launchProfile": "default"}
    _insert(
        db,
        "agentrun_runner_dispatch_intents",
        id="rdi_old5",
        run_id="run_old5",
        command_id="cmd_old5",
        kind="runner-job",
        input=request,
        input_hash=legacy_hash(request),
        state="pending",
        runner_job_id="rjob_old5",
        next_attempt_at=T0,
        last_error={"failureKind": "infra-failed"},
        created_at=T0,
        updated_at=T0,
    )
    _insert(
        db,
        "agentrun_kafka_event_outbox",
        id="obx_old1",
        outbox_seq=42,
        event_id="evt_run_old1_4",
        run_id="run_old1",
        source_seq=4,
        topic="agentrun.events",
        partition_key="tenant-a:run_old1",
        value={"specversion": "1.0", "id": "evt_run_old1_4", "type": "terminal_status"},
        created_at=T0,
        updated_at=T0,
    )


def _session_turn(db: psycopg.Connection[Any]) -> None:
    """A session whose one keyed turn completed, with its runner and runner job."""
    _insert(
        db,
        "agentrun_sessions",
        session_id="sess_old1",
        tenant_id="tenant-a",
        project_id="proj-1",
        backend_profile="codex",
        metadata={"owner": "ann"},
        created_at=T0,
        updated_at=T0,
        version=7,
        execution_state="idle",
        last_run_id="run_old1",
        last_command_id="cmd_old1",
        last_event_seq=4,
        terminal_status="completed",
        title="hello there",
        summary={"lastTerminalStatus": "completed", "turnCount": 1},
        storage_kind="pvc",
        storage_pvc_name="pvc-sess-old1",
        storage_namespace="agentrun",
    )
    session_ref = {"sessionId": "sess_old1", "conversationId": None, "metadata": {}}
    _run(db, "run_old1", "completed", session_ref=session_ref, trace_sink={"traceId": "tr-1"})
    _command(
        db,
        "run_old1",
        "cmd_old1",
        "hello there",
        idempotency_key="turn-key-1",
        state="completed",
        acknowledged_at=T0,
    )
    _events(
        db,
        "run_old1",
        ("backend_status", {"phase": "run-created", "commandId": "cmd_old1"}),
        ("user_message", {"text": "hello there", "commandId": "cmd_old1"}),
        ("agent_message", {"text": "hi!", "commandId": "cmd_old1"}),
        ("terminal_status", {"status": "completed", "commandId": "cmd_old1"}),
    )
    _insert(
        db,
        "agentrun_runners",
        id="runner_old1",
        run_id="run_old1",
        attempt_id="att-1",
        backend_profile="codex",
        metadata={"hostName": "node-1"},
        registered_at=T0,
        heartbeat_at=T0,
    )
    _insert(
        db,
        "agentrun_runner_jobs",
        id="rjob_old1",
        run_id="run_old1",
        command_id="cmd_old1",
        idempotency_key="job-key-1",
        payload_hash=legacy_hash({"job": 1}),
        attempt_id="att-1",
        runner_id="runner_old1",
        namespace="agentrun",
        job_name="agentrun-job-1",
        manager_url="http://manager",
        image="agentrun-runner:1",
        source_commit="abc123",
        result={"jobName": "agentrun-job-1", "podPhase": "Succeeded"},
        created_at=T0,
        updated_at=T0,
    )
    _insert(
        db,
        "agentrun_session_read_cursors",
        session_id="sess_old1",
        reader_id="reader-1",
        session_version=7,
        read_at=T0,
    )


def _cancelled_run(db: psycopg.Connection[Any]) -> None:
    cancel = {
        "cancel_epoch": 1,
        "cancel_request_id": "cancel_old1",
        "cancel_requested_at": T0,
        "cancel_reason": "user asked",
    }
    _run(db, "run_old2", "cancelled", failure_kind="cancelled", **cancel)
    _command(db, "run_old2", "cmd_old2", "long job", state="cancelled", **cancel)
    _events(
        db,
        "run_old2",
        ("backend_status", {"phase": "run-created", "commandId": "cmd_old2"}),
        ("user_message", {"text": "long job", "commandId": "cmd_old2"}),
        (
            "terminal_status",
            {
                "status": "cancelled",
                "commandId": "cmd_old2",
                "cancelRequestId": "cancel_old1",
                "cancelEpoch": 1,
            },
        ),
    )
    _insert(
        db,
        "agentrun_cancel_requests",
        id="cancel_old1",
        target_kind="run",
        target_id="run_old2",
        run_id="run_old2",
        command_id="cmd_old2",
        reason="user asked",
        requested_by="key-1",
        epoch=1,
        stage="terminalized",
        metadata={"requestedVia": "api"},
        created_at=T0,
        updated_at=T0,
    )


TASK = {
    "project_id": "proj-1",
    "queue": "default",
    "lane": "main",
    "title": "fix the bug",
    "priority": 10,
    "backend_profile": "codex",
    "provider_id": "openai",
    "workspace_ref": {"path": "/work/repo"},
    "execution_policy": {"sandbox": "workspace-write"},
    "payload": {"text": "fix the bug"},
}


def _queue(db: psycopg.Connection[Any]) -> None:
    """A task that failed once and then completed on retry, and a pending one."""
    task_hash = legacy_hash(TASK)
    latest = {
        "attemptId": "qa_old2",
        "retryIndex": 1,
        "state": "completed",
        "runId": "run_old4",
        "commandId": "cmd_old4",
        "runnerJobId": None,
        "sessionId": None,
        "sessionPath": None,
        "failureKind": None,
        "failureMessage": None,
    }
    _insert(
        db,
        "agentrun_queue_tasks",
        id="qt_old1",
        tenant_id="tenant-a",
        state="completed",
        version=5,
        payload_hash=task_hash,
        idempotency_key="task-key-1",
        latest_attempt=latest,
        created_at=T0,
        updated_at=T0,
        **TASK,
    )
    _insert(
        db,
        "agentrun_queue_tasks",
        id="qt_old2",
        tenant_id="tenant-a",
        project_id="proj-1",
        queue="default",
        lane="main",
        title="later",
        priority=0,
        state="pending",
        version=3,
        backend_profile="codex",
        payload={"text": "later"},
        payload_hash=legacy_hash({"text": "later"}),
        created_at=T0,
        updated_at=T0,
    )
    for index, (attempt, run, state) in enumerate(
        [("qa_old1", "run_old3", "failed"), ("qa_old2", "run_old4", "completed")]
    ):
        command = run.replace("run", "cmd")
        trace = {"taskId": "qt_old1", "attemptId": attempt}
        _run(
            db,
            run,
            state,
            trace_sink=trace,
            failure_kind="backend-failed" if state == "failed" else None,
        )
        _command(db, run, command, "fix the bug", state=state)
        _events(
            db,
            run,
            ("user_message", {"text": "fix the bug", "commandId": command}),
            ("terminal_status", {"status": state, "commandId": command}),
        )
        _insert(
            db,
            "agentrun_queue_attempts",
            attempt_id=attempt,
            task_id="qt_old1",
            retry_index=index,
            state=state,
            payload_hash=task_hash,
            run_id=run,
            command_id=command,
            previous_attempt_id="qa_old1" if index else None,
            failure_kind="backend-failed" if state == "failed" else None,
            created_at=T0,
            updated_at=T0,
            activated_at=T0,
            terminal_at=T0,
        )
    _insert(
        db,
        "agentrun_queue_read_cursors",
        task_id="qt_old1",
        reader_id="reader-1",
        task_version=5,
        read_at=T0,
    )


def _pending_run(db: psycopg.Connection[Any]) -> None:
    """A run still waiting for a runner: new commands append to its event log."""
    _run(db, "run_old5", "pending")
    _command(db, "run_old5", "cmd_old5", "queued work", state="pending")
    _events(
        db,
        "run_old5",
        ("backend_status", {"phase": "run-created", "commandId": "cmd_old5"}),
        ("user_message", {"text": "queued work", "commandId": "cmd_old5"}),
    )
