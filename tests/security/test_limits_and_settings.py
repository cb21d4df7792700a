"""Input limits and safe defaults: request bodies over `DATA_UPLOAD_MAX_MEMORY_SIZE` are a
413 in the error envelope (DRF JSON bodies included), per-field limits a 400 naming the
field; DEBUG is off unless asked for; production mode refuses to start without a
SECRET_KEY while a local start needs no configuration at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from pytest_django.fixtures import Settings as SettingsWrapper

from runs.models import Event, Run
from tests.api.helpers import API, claimed_run_with_command, fencing, run_body
from tests.builders import key_client

pytestmark = pytest.mark.django_db


def test_a_json_body_over_the_request_limit_is_a_413_envelope(settings: SettingsWrapper) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    body = json.dumps(run_body(workspace_ref={"path": "x" * 100_000}))
    response = key_client(role="client").generic(
        "POST", f"{API}/runs", body, content_type="application/json"
    )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and error["details"]["max_bytes"] == 64 * 1024
    assert not Run.objects.exists()


def test_the_default_request_limit_holds_a_full_event_batch() -> None:
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == 16 * 1024 * 1024


def test_an_event_payload_over_its_own_limit_is_a_400_naming_the_field() -> None:
    run, _, runner = claimed_run_with_command()
    before = Event.objects.filter(run=run).count()
    body = {**fencing(run), "type": "log", "payload": {"line": "x" * (1024 * 1024 + 1)}}
    response = runner.post(f"{API}/runs/{run.id}/events", body, format="json")
    assert response.status_code == 400
    assert "payload" in response.json()["error"]["message"]
    assert Event.objects.filter(run=run).count() == before


def _start(**env: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter that loads the settings and prints DEBUG."""
    environment = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    environment.update(env)
    code = "import django; django.setup(); from django.conf import settings; print(settings.DEBUG)"
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**environment, "DJANGO_SETTINGS_MODULE": "agentrun.settings"},
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_debug_is_off_by_default_and_a_local_start_needs_no_secret_key() -> None:
    started = _start()
    assert started.returncode == 0, started.stderr[-1000:]
    assert started.stdout.strip() == "False"


def test_production_mode_refuses_to_start_without_a_secret_key() -> None:
    refused = _start(AGENTRUN_ENV="production")
    assert refused.returncode != 0
    assert "ImproperlyConfigured" in refused.stderr
    assert "SECRET_KEY is not set" in refused.stderr


def test_production_mode_starts_with_a_secret_key() -> None:
    started = _start(AGENTRUN_ENV="production", SECRET_KEY="s" * 50)
    assert started.returncode == 0, started.stderr[-1000:]
    assert started.stdout.strip() == "False"
