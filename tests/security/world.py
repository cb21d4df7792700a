"""A small world for the security tests: one tenant's run, command, runner job, session,
queue task and attempt (made through the services), and every API operation from the
OpenAPI document with its path filled in."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from drf_spectacular.generators import SchemaGenerator
from rest_framework.response import Response
from rest_framework.test import APIClient

from queues.models import QueueAttempt
from queues.services.scheduler import schedule_batch
from queues.services.tasks import TaskSpec, create_task
from runs.services.command_lifecycle import create_command
from runs.services.lifecycle import claim_run
from runs.services.runners import RunnerJobSpec, save_runner_job
from sessions.services.admission import admit_turn
from sessions.turns import TurnRequest
from tests.builders import make_run, run_spec

API = "/api/v1"


@dataclass(frozen=True)
class World:
    tenant: str
    run_id: str
    command_id: str
    runner_job_id: str
    session_id: str
    task_id: str
    attempt_id: str

    def path(self, template: str) -> str:
        """An operation's path with this world's ids (the owning resource decides)."""
        values = {
            "/runs/": self.run_id,
            "/commands/": self.command_id,
            "/runner-jobs/": self.runner_job_id,
            "/sessions/": self.session_id,
            "/queue/tasks/": self.task_id,
        }
        owner = next((v for prefix, v in values.items() if template.startswith(prefix)), "x")
        return template.replace("{attempt_id}", self.attempt_id).replace("{id}", owner)


def make_world(tenant: str) -> World:
    run = claim_run(run_id=make_run(tenant_id=tenant).id, runner_id="runner-1", lease_ms=600_000)
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    job = save_runner_job(
        run_id=run.id,
        spec=RunnerJobSpec(
            command_id=command.id,
            attempt_id="attempt-1",
            runner_id="runner-1",
            namespace="ns",
            job_name="job",
            manager_url="http://127.0.0.1",
            image="img",
            source_commit="abc",
        ),
        idempotency_key=f"job-{tenant}",
    ).job
    session_id = f"sess-{tenant}"
    admit_turn(
        request=TurnRequest(
            session_id=session_id,
            tenant_id=tenant,
            spec=run_spec(session_ref={"session_id": session_id}),
            payload={"text": "hello"},
            dispatch=None,
        )
    )
    task = create_task(
        tenant_id=tenant,
        spec=TaskSpec(
            project_id="proj-1",
            queue="default",
            lane="default",
            title="a task",
            priority=0,
            backend_profile="scripted",
            provider_id="openai",
            workspace_ref={"path": "/work/repo"},
            payload={"text": "task"},
            dispatch=None,
        ),
    ).task
    schedule_batch(limit=10)
    attempt = QueueAttempt.objects.get(task=task)
    return World(tenant, run.id, command.id, job.id, session_id, task.id, attempt.attempt_id)


MISSING = World("nobody", "run_missing", "cmd_missing", "rjob_missing", "sess-missing",
                "qt_missing", "qa_missing")  # fmt: skip


@cache
def operations() -> list[tuple[str, str]]:
    """Every (METHOD, path template under /api/v1) the OpenAPI document lists."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, methods in schema["paths"].items():
        if path.startswith(API + "/"):
            found += [(method.upper(), path[len(API) :]) for method in methods]
    return sorted(found)


def call(client: APIClient, method: str, path: str, body: Any = None) -> Response:
    sender = getattr(client, method.lower())
    if method == "GET":
        return sender(f"{API}{path}")  # type: ignore[no-any-return]
    return sender(f"{API}{path}", body or {}, format="json")  # type: ignore[no-any-return]
