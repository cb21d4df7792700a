"""Credentials in the shapes an agent prints them: an environment dump (`env`, a crash
report), a DSN with its password, a JWT without a `Bearer` prefix. A runner posting them
in events, runner metadata or a failure message, or a service logging them, stores and
prints none of them."""

from __future__ import annotations

import json
import logging

import pytest

from agentrun.logs import JsonFormatter, RedactingTextFormatter
from agentrun.redaction import REDACTED, redact_text
from runs.models import Event, Run, Runner
from tests.api.helpers import API, claimed_run_with_command, fencing

pytestmark = pytest.mark.django_db

DB_PASSWORD = "Pg-pass-9f3k2"
SECRET_VALUE = "django-insecure-k3y-0f-th3-s3rv3r"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJ0ZW5hbnQtYiIsInJvbGUiOiJvcGVyYXRvciJ9."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
ENV_DUMP = "\n".join(
    [
        "HOME=/home/agent",
        f"DATABASE_URL=postgres://agentrun:{DB_PASSWORD}@db.internal:5432/agentrun",
        f"SECRET_KEY={SECRET_VALUE}",
        "export AWS_SECRET_ACCESS_KEY='wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'",
        "PGPASSWORD=hunter2-pg",
        "max_tokens=4096",
    ]
)
DSNS = [
    f"postgres://agentrun:{DB_PASSWORD}@db.internal:5432/agentrun",
    "redis://:redis-pass-77@127.0.0.1:6379/0",
    "amqp://guest:amqp-pass-55@rabbit:5672//",
]
SECRETS = [DB_PASSWORD, SECRET_VALUE, "wJalrXUtnFEMI", "hunter2-pg", "redis-pass-77"]
SECRETS.append("amqp-pass-55")


def _leaks(text: str) -> list[str]:
    return [s for s in [*SECRETS, JWT.split(".")[1]] if s in text]


def test_an_environment_dump_keeps_names_and_harmless_values() -> None:
    text = redact_text(ENV_DUMP)
    assert _leaks(text) == []
    assert "HOME=/home/agent" in text and "max_tokens=4096" in text
    assert f"SECRET_KEY={REDACTED}" in text and f"PGPASSWORD={REDACTED}" in text


@pytest.mark.parametrize("dsn", DSNS)
def test_a_dsn_keeps_its_host_and_loses_its_password(dsn: str) -> None:
    text = redact_text(f"could not connect to {dsn}: refused")
    assert _leaks(text) == [] and f":{REDACTED}@" in text


def test_output_events_with_env_dumps_dsns_and_jwts_are_stored_redacted() -> None:
    run, _, runner = claimed_run_with_command()
    payload = {"output": ENV_DUMP, "dsns": DSNS, "note": f"token {JWT} ok"}
    body = {**fencing(run), "type": "tool_output", "payload": payload}
    answer = runner.post(f"{API}/runs/{run.id}/events", body, format="json")
    assert answer.status_code == 201, answer.content
    stored = json.dumps(Event.objects.filter(run=run, type="tool_output").get().payload)
    assert _leaks(stored) == [] and _leaks(answer.content.decode()) == []


def test_runner_metadata_and_failure_messages_are_stored_redacted() -> None:
    run, _, runner = claimed_run_with_command()
    metadata = {"env": {"DATABASE_URL": DSNS[0], "HOME": "/h"}, "jwt": JWT, "dump": ENV_DUMP}
    answer = runner.post(f"{API}/runners", {"id": "runner-1", "metadata": metadata}, format="json")
    assert answer.status_code == 200, answer.content
    stored = Runner.objects.get(pk="runner-1").metadata
    assert _leaks(json.dumps(stored)) == [] and stored["env"]["HOME"] == "/h"
    finished = runner.post(
        f"{API}/runs/{run.id}/finish",
        {**fencing(run), "terminal_status": "failed", "failure_kind": "backend-failed",
         "failure_message": f"crashed with {DSNS[1]} and {JWT}\n{ENV_DUMP}"},
        format="json",
    )  # fmt: skip
    assert finished.status_code == 200, finished.content
    failed = Run.objects.get(pk=run.pk)
    events = json.dumps([e.payload for e in Event.objects.filter(run=run)])
    assert _leaks(failed.failure_message or "") == [] and _leaks(events) == []


@pytest.mark.parametrize("formatter", [JsonFormatter(), RedactingTextFormatter("%(message)s")])
def test_log_lines_with_env_dumps_dsns_and_jwts_are_redacted(
    formatter: logging.Formatter,
) -> None:
    record = logging.makeLogRecord(
        {"name": "agentrun.test", "levelname": "ERROR", "msg": "%s", "args": (ENV_DUMP,)}
    )
    record.detail = {"dsn": DSNS[2], "token_hint": JWT}
    assert _leaks(formatter.format(record)) == []
