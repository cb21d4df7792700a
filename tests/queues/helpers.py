"""Builders for the queue tests: tasks through the real services, runs moved by the real
runner protocol (claim, ack, finish)."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.test import APIClient

from queues.models import QueueAttempt, QueueTask
from queues.services.scheduler import ScheduleResult, schedule_batch
from queues.services.tasks import TaskSpec, create_task
from runs.models import Command, Run
from runs.services.command_lifecycle import ack_command, finish_command
from runs.services.lifecycle import claim_run, finish_run
from runs.services.terminal import TurnResult

API = "/api/v1"


def task_spec(**overrides: Any) -> TaskSpec:
    values: dict[str, Any] = {
        "project_id": "proj-1",
        "queue": "default",
        "lane": "default",
        "title": "fix the flaky test",
        "priority": 0,
        "backend_profile": "scripted",
        "provider_id": "openai",
        "workspace_ref": {"path": "/work/repo"},
        "payload": {"text": "fix the flaky test"},
        "dispatch": None,
    }
    values.update(overrides)
    return TaskSpec(**values)


def file_task(*, tenant_id: str = "tenant-a", **overrides: Any) -> QueueTask:
    return create_task(tenant_id=tenant_id, spec=task_spec(**overrides)).task


def task_body(**overrides: Any) -> dict[str, Any]:
    """A valid POST /queue/tasks body."""
    body: dict[str, Any] = {
        "project_id": "proj-1",
        "queue": "default",
        "lane": "default",
        "title": "fix the flaky test",
        "priority": 5,
        "backend_profile": "scripted",
        "provider_id": "openai",
        "workspace_ref": {"path": "/work/repo"},
        "payload": {"text": "fix the flaky test"},
        "dispatch": None,
    }
    body.update(overrides)
    return body


def schedule(limit: int = 100) -> ScheduleResult:
    return schedule_batch(limit=limit)


def task(task_id: str) -> QueueTask:
    return QueueTask.objects.get(pk=task_id)


def attempts(task_id: str) -> list[QueueAttempt]:
    return list(QueueAttempt.objects.filter(task_id=task_id).order_by("retry_index"))


def run_of(task_id: str) -> Run:
    """The run of the task's latest attempt."""
    return Run.objects.get(pk=task(task_id).latest_attempt["run_id"])


def finish(run: Run, *, status: str = "completed", **result: Any) -> Run:
    """A runner claims the run, acknowledges and finishes its turn, then the run."""
    runner_id = f"runner-{run.id[-6:]}"
    claimed = claim_run(run_id=run.id, runner_id=runner_id, lease_ms=60_000)
    epoch = claimed.lease_epoch
    report = TurnResult(terminal_status=status, **result)
    for command in Command.objects.filter(run=run, type="turn", state="pending"):
        ack_command(command_id=command.id, runner_id=runner_id, lease_epoch=epoch)
        finish_command(command_id=command.id, runner_id=runner_id, lease_epoch=epoch, result=report)
    return finish_run(run_id=run.id, runner_id=runner_id, lease_epoch=epoch, result=report)


def call(client: APIClient, method: str, path: str, body: Any = None) -> Response:
    send = getattr(client, method.lower())
    if method.upper() == "GET":
        return send(f"{API}{path}")  # type: ignore[no-any-return]
    return send(f"{API}{path}", body if body is not None else {}, format="json")  # type: ignore[no-any-return]
