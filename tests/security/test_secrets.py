"""Secrets at rest and in logs: API keys are stored as digests only; credentials in event
payloads, runner metadata and error messages are redacted before they are stored, and the
log formatters redact messages and extra fields."""

from __future__ import annotations

import hashlib
import io
import json
import logging

import pytest
from django.core.management import call_command
from django.db import connection

from agentrun.logs import JsonFormatter, RedactingTextFormatter
from agentrun.models import ApiKey
from agentrun.redaction import REDACTED
from queues.models import QueueAttempt
from runs.models import Event, Run, Runner
from tests.api.helpers import API, claimed_run_with_command, fencing
from tests.builders import key_client
from tests.security.world import make_world

pytestmark = pytest.mark.django_db
PROVIDER_KEY = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.payload.signature"


def _row_text(table: str, where: str, value: str) -> str:
    with connection.cursor() as cursor:
        # Table and column names are fixed strings of these tests, never input.
        cursor.execute(f"SELECT row_to_json(t)::text FROM {table} t WHERE {where} = %s", [value])  # noqa: S608
        return "\n".join(row[0] for row in cursor.fetchall())


def test_api_keys_are_stored_as_digests_only() -> None:
    out = io.StringIO()
    call_command("create_api_key", "--tenant", "tenant-a", "--role", "client", "--json", stdout=out)
    issued = json.loads(out.getvalue())
    secret = issued["key"]
    stored = ApiKey.objects.get(pk=issued["id"])
    assert stored.key_digest == hashlib.sha256(secret.encode()).hexdigest()
    assert len(stored.key_prefix) < len(secret) // 2
    row = _row_text("agentrun_api_keys", "id", stored.id)
    assert secret not in row and secret[len(stored.key_prefix) :] not in row
    assert key_client(role="client").get(f"{API}/runs").status_code == 200


def test_credentials_in_event_payloads_are_redacted_before_storage() -> None:
    run, _, runner = claimed_run_with_command()
    body = {
        **fencing(run),
        "type": "tool_output",
        "payload": {"output": f"export OPENAI_API_KEY={PROVIDER_KEY}", "api_key": "hunter2",
                    "headers": {"Authorization": BEARER}, "input_tokens": 12},
    }  # fmt: skip
    answer = runner.post(f"{API}/runs/{run.id}/events", body, format="json")
    assert answer.status_code == 201, answer.content
    stored = Event.objects.filter(run=run, type="tool_output").get()
    text = json.dumps(stored.payload)
    assert PROVIDER_KEY not in text and "hunter2" not in text and "eyJhbGci" not in text
    assert stored.payload["api_key"] == REDACTED
    assert stored.payload["input_tokens"] == 12  # counts are not secrets
    assert PROVIDER_KEY not in answer.content.decode()


def test_credentials_in_runner_metadata_are_redacted_before_storage() -> None:
    _, _, runner = claimed_run_with_command()
    metadata = {"token": "ghp_" + "x" * 30, "note": f"pulled with {BEARER}", "region": "eu"}
    answer = runner.post(f"{API}/runners", {"id": "runner-1", "metadata": metadata}, format="json")
    assert answer.status_code == 200, answer.content
    stored = Runner.objects.get(pk="runner-1").metadata
    assert stored["token"] == REDACTED and "eyJhbGci" not in stored["note"]
    assert stored["region"] == "eu"


def test_credentials_in_error_messages_are_redacted_before_storage() -> None:
    run, _, runner = claimed_run_with_command()
    message = f"backend refused {BEARER} and key {PROVIDER_KEY}"
    finished = runner.post(
        f"{API}/runs/{run.id}/finish",
        {**fencing(run), "terminal_status": "failed", "failure_kind": "backend-failed",
         "failure_message": message},
        format="json",
    )  # fmt: skip
    assert finished.status_code == 200, finished.content
    stored = Run.objects.get(pk=run.pk)
    assert stored.failure_message is not None and REDACTED in stored.failure_message
    row = _row_text("agentrun_runs", "id", run.id) + _row_text("agentrun_events", "run_id", run.id)
    assert PROVIDER_KEY not in row and "eyJhbGci" not in row


def test_credentials_in_queue_attempt_failures_are_redacted_before_storage() -> None:
    world = make_world("tenant-a")
    client = key_client(role="client", tenant_id="tenant-a")
    answer = client.post(
        f"{API}/queue/tasks/{world.task_id}/attempts/{world.attempt_id}/failure",
        {"failure_kind": "backend-failed", "failure_message": f"leaked {PROVIDER_KEY}"},
        format="json",
    )
    assert answer.status_code == 200, answer.content
    attempt = QueueAttempt.objects.get(attempt_id=world.attempt_id)
    assert PROVIDER_KEY not in (attempt.failure_message or "")
    assert PROVIDER_KEY not in _row_text("agentrun_queue_tasks", "id", world.task_id)


@pytest.mark.parametrize("formatter", [JsonFormatter(), RedactingTextFormatter("%(message)s")])
def test_log_lines_are_redacted(formatter: logging.Formatter) -> None:
    record = logging.makeLogRecord(
        {
            "name": "agentrun.test",
            "levelname": "WARNING",
            "msg": "runner said %s",
            "args": (f"use {BEARER}",),
        }
    )
    record.password = "hunter2"
    record.detail = {"key": PROVIDER_KEY}
    line = formatter.format(record)
    assert "eyJhbGci" not in line and "hunter2" not in line
    if isinstance(formatter, JsonFormatter):
        assert PROVIDER_KEY not in line


def test_the_configured_handlers_redact_what_a_service_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The console handler of settings.LOGGING formats through the redacting formatters."""
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler.formatter, (JsonFormatter, RedactingTextFormatter))
    stream = io.StringIO()
    probe = logging.StreamHandler(stream)
    probe.setFormatter(handler.formatter)
    logger = logging.getLogger("agentrun.runs")
    logger.addHandler(probe)
    try:
        logger.warning("finish refused for %s", BEARER)
    finally:
        logger.removeHandler(probe)
    assert "eyJhbGci" not in stream.getvalue() and REDACTED in stream.getvalue()
