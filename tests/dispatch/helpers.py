"""Builders and test launchers for the dispatch tests. State comes from the real services;
the launchers below stand in for the outside world (a process table, a cluster) only."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentrun.celery import app as celery_app
from dispatch.launchers import Launched, LaunchError, LaunchRequest
from dispatch.models import RunnerDispatchIntent
from runs.models import Backend, Command, Event, Run, RunnerJob
from runs.services.command_lifecycle import create_command
from tests.builders import make_run


def make_dispatch_command(*, dispatch: dict[str, Any] | None = None, **spec: Any) -> Command:
    """A new run with one `turn` command that asks to be dispatched."""
    run = make_run(**spec)
    return create_command(
        run_id=run.id, type="turn", payload={"text": "go"}, dispatch=dispatch or {}
    ).command


def launch_request(**overrides: Any) -> LaunchRequest:
    """A launch request as the dispatch step builds one; `options` names the profile."""
    base = LaunchRequest(
        intent_id="rdi_1", run_id="run_01ABC", command_id="cmd_1", tenant_id="t",
        backend_profile="codex", runner_job_id="rjob_01JD3KXYZ", runner_id="runner_01JD3KXYZ",
        attempt_count=1, runner_key="ar_runner_secret", api_url="http://agentrun:8000",
    )  # fmt: skip
    return dataclasses.replace(base, **overrides)


def set_capacity(profile: str, max_concurrent_runs: int) -> None:
    Backend.objects.filter(profile=profile).update(
        capacity={"max_concurrent_runs": max_concurrent_runs}
    )


def intent_of(command: Command) -> RunnerDispatchIntent:
    return RunnerDispatchIntent.objects.get(command=command)


def phases(run: Run | str) -> list[str]:
    events = Event.objects.filter(run=run).order_by("seq")
    return [e.payload.get("phase") or e.type for e in events]


class RecordingLauncher:
    """Launches nothing; counts launches per intent, thread-safely. `on_launch` runs inside
    `launch` (to race a cancel against it, or to watch capacity)."""

    name = "local"

    def __init__(self, on_launch: Callable[[LaunchRequest], None] | None = None) -> None:
        self.launches: Counter[str] = Counter()
        self.aborted: list[str] = []
        self.requests: list[LaunchRequest] = []
        self._lock = threading.Lock()
        self._on_launch = on_launch

    def launch(self, request: LaunchRequest) -> Launched:
        if self._on_launch is not None:
            self._on_launch(request)
        with self._lock:
            self.launches[request.intent_id] += 1
            self.requests.append(request)
        return Launched(
            launcher=self.name,
            job_name=f"test-{request.runner_job_id}",
            namespace="test",
            image="",
            manager_url=request.api_url,
            runner_id=request.runner_id,
            source_commit="test",
        )

    def abort(self, launched: Launched) -> None:
        self.aborted.append(launched.job_name)

    def observe(self, job: RunnerJob) -> str:
        return "active"


class FailingLauncher(RecordingLauncher):
    """Every launch fails, as a cluster that refuses every Job would."""

    def launch(self, request: LaunchRequest) -> Launched:
        with self._lock:
            self.launches[request.intent_id] += 1
        raise LaunchError("the cluster refused the job", status=503)


@contextmanager
def celery_broker(url: str) -> Iterator[None]:
    """Point this process's Celery producer at `url` for a while (wake-ups sent by
    `on_commit`). Resets the cached producer pool, which Celery builds on first use."""
    conf = celery_app.conf
    saved = conf.broker_url, conf.broker_transport_options

    def reset() -> None:
        celery_app._pool = None
        celery_app.amqp._producer_pool = None

    conf.broker_url, conf.broker_transport_options = url, {}
    reset()
    try:
        yield
    finally:
        conf.broker_url, conf.broker_transport_options = saved
        reset()
