"""Real objects for the fuzzer to hit: without them every generated id is a 404 and the
handlers behind the lookups are never reached."""

from __future__ import annotations

from dataclasses import dataclass

from queues.models import QueueAttempt
from queues.services.scheduler import schedule_batch
from queues.services.tasks import TaskSpec, create_task
from runs.models import Command, RunnerJob
from runs.services.command_lifecycle import create_command
from runs.services.lifecycle import claim_run
from runs.services.runners import RunnerJobSpec, save_runner_job
from sessions.services.admission import admit_turn
from sessions.turns import TurnRequest
from tests.builders import make_run, run_spec

TENANT = "tenant-fuzz"


@dataclass(frozen=True)
class Seeds:
    run_id: str
    command_id: str
    session_id: str
    task_id: str
    attempt_id: str
    runner_job_id: str

    def for_path(self, path: str, name: str) -> str | None:
        """The real id to put in path parameter `name` of `path`, if any."""
        if name == "attempt_id":
            return self.attempt_id
        for prefix, value in (
            ("/api/v1/runs/", self.run_id),
            ("/api/v1/commands/", self.command_id),
            ("/api/v1/sessions/", self.session_id),
            ("/api/v1/queue/tasks/", self.task_id),
            ("/api/v1/runner-jobs/", self.runner_job_id),
        ):
            if path.startswith(prefix):
                return value
        return None


def make_seeds() -> Seeds:
    run = claim_run(run_id=make_run(tenant_id=TENANT).id, runner_id="runner-1", lease_ms=600_000)
    command: Command = create_command(
        run_id=run.id, type="turn", payload={"text": "fuzz"}, dispatch=None
    ).command
    job: RunnerJob = save_runner_job(
        run_id=run.id,
        spec=RunnerJobSpec(
            command_id=command.id,
            attempt_id="attempt-1",
            runner_id="runner-1",
            namespace="ns",
            job_name="job-1",
            manager_url="http://127.0.0.1",
            image="img",
            source_commit="abc",
        ),
        idempotency_key="fuzz-job",
    ).job
    admit_turn(
        request=TurnRequest(
            session_id="sess-fuzz",
            tenant_id=TENANT,
            spec=run_spec(session_ref={"session_id": "sess-fuzz"}),
            payload={"text": "hello"},
            dispatch=None,
        )
    )
    task = create_task(
        tenant_id=TENANT,
        spec=TaskSpec(
            project_id="proj-1",
            queue="default",
            lane="default",
            title="fuzz task",
            priority=0,
            backend_profile="scripted",
            provider_id="openai",
            workspace_ref={"path": "/work/repo"},
            payload={"text": "task"},
            dispatch=None,
        ),
    ).task
    schedule_batch(limit=5)  # the task gets a running attempt
    attempt = QueueAttempt.objects.filter(task=task).first()
    return Seeds(
        run_id=run.id,
        command_id=command.id,
        session_id="sess-fuzz",
        task_id=task.id,
        attempt_id=attempt.attempt_id if attempt else "qa_missing",
        runner_job_id=job.id,
    )
