"""Builders and assertions shared by the API tests. State comes from the real services."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.response import Response
from rest_framework.test import APIClient

from agentrun.models import ApiKey
from runs.models import Command, Event, Run, RunnerJob
from runs.services.command_lifecycle import create_command
from runs.services.runners import RunnerJobSpec, save_runner_job
from tests.builders import key_client, make_claimed_run

API = "/api/v1"
ENVELOPE_KEYS = {"code", "failure_kind", "message", "details"}


def run_body(**overrides: Any) -> dict[str, Any]:
    """A valid POST /runs body."""
    body: dict[str, Any] = {
        "project_id": "proj-1",
        "workspace_ref": {"path": "/work/repo"},
        "provider_id": "openai",
        "backend_profile": "scripted",
        "execution_policy": {"sandbox": "workspace-write"},
    }
    body.update(overrides)
    return body


def make_command(run: Run, *, text: str = "hello", **kwargs: Any) -> Command:
    return create_command(run_id=run.id, type="turn", payload={"text": text}, **kwargs).command


def runner_job_body(command_id: str, **overrides: Any) -> dict[str, Any]:
    """A valid POST /runs/{id}/runner-jobs body."""
    body: dict[str, Any] = {
        "command_id": command_id,
        "attempt_id": "attempt-1",
        "runner_id": "runner-1",
        "namespace": "agents",
        "job_name": "job-1",
        "manager_url": "http://manager.local",
        "image": "agentrun/runner:1",
        "source_commit": "abc123",
    }
    body.update(overrides)
    return body


def make_runner_job(run: Run, command: Command, **overrides: Any) -> RunnerJob:
    fields = runner_job_body(command.id, **overrides)
    key = fields.pop("idempotency_key", None)
    return save_runner_job(run_id=run.id, spec=RunnerJobSpec(**fields), idempotency_key=key).job


def runner_for(run: Run) -> APIClient:
    """A runner key scoped to `run`."""
    return key_client(role="runner", tenant_id=run.tenant_id, run_id=run.id)


def claimed_run_with_command(*, runner_id: str = "runner-1") -> tuple[Run, Command, APIClient]:
    """A run claimed by `runner_id` (lease epoch 1), one pending turn, and a runner key."""
    run = make_claimed_run(runner_id=runner_id)
    command = make_command(run)
    return run, command, runner_for(run)


def fencing(run: Run, runner_id: str = "runner-1") -> dict[str, Any]:
    """The fencing token a runner write carries."""
    return {"runner_id": runner_id, "lease_epoch": run.lease_epoch}


def revoke(api_key: ApiKey) -> None:
    ApiKey.objects.filter(pk=api_key.pk).update(revoked_at=timezone.now())


def event_count(run: Run) -> int:
    return Event.objects.filter(run_id=run.id).count()


def error_of(response: Response, status: int) -> dict[str, Any]:
    """Assert the status and the error envelope; return the inner error."""
    body = response.json()
    assert response.status_code == status, body
    assert set(body) == {"error"}, body
    assert set(body["error"]) == ENVELOPE_KEYS, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def call(client: APIClient, method: str, path: str, body: Any = None) -> Response:
    """Send `body` as JSON with `method` to `path` under /api/v1."""
    send = getattr(client, method.lower())
    if method.upper() == "GET":
        return send(f"{API}{path}")  # type: ignore[no-any-return]
    return send(f"{API}{path}", body if body is not None else {}, format="json")  # type: ignore[no-any-return]
