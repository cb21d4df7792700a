"""Structured logs: JSON lines carrying the bound ids, and never a secret."""

from __future__ import annotations

import io
import json
import logging

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from agentrun import logs
from tests.builders import key_client, make_claimed_run
from tests.ops.world import quiet_settings


@pytest.fixture(autouse=True)
def quiet(settings: SettingsWrapper) -> None:
    quiet_settings(settings)


def _capture(formatter: logging.Formatter) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(formatter)
    logger = logging.getLogger("agentrun.test")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, stream


def test_json_lines_carry_bound_ids_and_redact_secrets() -> None:
    logger, stream = _capture(logs.JsonFormatter())
    with logs.bind(run_id="run_1", session_id="sess_1"):
        logger.info(
            "calling with Authorization: Bearer abcdefghijklmnopqrstu",
            extra={"payload": {"api_key": "sk-live-0123456789abcdefghij", "n": 1}},
        )
    line = json.loads(stream.getvalue())
    assert (line["run_id"], line["session_id"]) == ("run_1", "sess_1")
    assert "abcdefghijklmnopqrstu" not in stream.getvalue()
    assert "0123456789abcdefghij" not in stream.getvalue()
    assert line["payload"] == {"api_key": "[redacted]", "n": 1}


def test_text_lines_are_redacted_too() -> None:
    logger, stream = _capture(logs.RedactingTextFormatter("%(message)s"))
    with logs.bind(task_id="qt_1"):
        logger.warning("token sk-proj-abcdefghijklmnopqrstuvwx leaked?")
    assert "abcdefghijklmnopqrstuvwx" not in stream.getvalue()
    assert "task_id=qt_1" in stream.getvalue()


@pytest.mark.django_db
def test_a_request_binds_the_run_id_and_answers_with_a_request_id() -> None:
    run = make_claimed_run()
    api = key_client(role="client")
    seen: list[dict[str, str]] = []

    class Spy(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(logs.current())

    spy = Spy()
    logging.getLogger("agentrun.runs").addHandler(spy)
    try:
        response = api.post(f"/api/v1/runs/{run.id}/cancel", {"reason": "stop"}, format="json")
    finally:
        logging.getLogger("agentrun.runs").removeHandler(spy)
    assert response.status_code == 200
    assert response["X-Request-Id"]
    assert seen and seen[0]["run_id"] == run.id and "request_id" in seen[0]


@pytest.mark.django_db
def test_a_request_id_the_client_sent_is_bound_and_echoed() -> None:
    run = make_claimed_run()
    api = key_client(role="client")
    response = api.get(f"/api/v1/runs/{run.id}", HTTP_X_REQUEST_ID="req-from-client")
    assert response.status_code == 200
    assert response["X-Request-Id"] == "req-from-client"
    long = api.get(f"/api/v1/runs/{run.id}", HTTP_X_REQUEST_ID="x" * 500)
    assert long["X-Request-Id"] == "x" * 100
