"""The launcher interface: what the dispatch step needs from a way of starting runners.

A launcher does I/O only (a subprocess, a Kubernetes API call). It never touches the
database: the dispatch step issues the runner key before and records the outcome after,
each in its own short transaction, so no transaction is open while a launcher runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrun import conf
from runs.models import RunnerJob


class LaunchError(Exception):
    """A launch that did not happen. The intent is retried with backoff, then failed."""

    def __init__(self, message: str, *, reason: str = "launch-failed", **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.details = details

    def as_json(self) -> dict[str, Any]:
        return {"message": self.message, "reason": self.reason, **self.details}


def launch_profile(options: dict[str, Any] | Any) -> dict[str, Any]:
    """The operator's launch profile an intent's `dispatch` object names (`default` when it
    names none). Errors: `LaunchError` for a profile the operator has since removed."""
    name = options.get("launch_profile") or "default"
    profiles = conf.launch_profiles()
    if name not in profiles:
        raise LaunchError(f"unknown launch profile {name!r}", reason="unknown-launch-profile")
    return profiles[name]


@dataclass(frozen=True)
class LaunchRequest:
    """One runner job to start. `runner_key` is a fresh run-scoped API key secret."""

    intent_id: str
    run_id: str
    command_id: str
    tenant_id: str
    backend_profile: str
    runner_job_id: str  # the intent's planned id: stable across attempts
    runner_id: str
    attempt_count: int
    runner_key: str
    api_url: str
    options: dict[str, Any] = field(default_factory=dict)  # the command's `dispatch` object
    session_id: str | None = None  # the run's session: its Codex home outlives the run

    @property
    def profile(self) -> dict[str, Any]:
        """The launch profile (operator settings) this request names."""
        return launch_profile(self.options)


@dataclass(frozen=True)
class Launched:
    """What a launcher started, in the shape of a runner job record."""

    launcher: str
    job_name: str
    namespace: str
    image: str
    manager_url: str
    runner_id: str
    source_commit: str
    outcome: str = "launched"  # or "existing" when an idempotent launch found its job
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of_job(cls, job: RunnerJob) -> Launched:
        """What was launched, back from its runner job record (to abort it later)."""
        return cls(
            launcher=str(job.result.get("launcher")),
            job_name=job.job_name,
            namespace=job.namespace,
            image=job.image,
            manager_url=job.manager_url,
            runner_id=job.runner_id,
            source_commit=job.source_commit,
            outcome=str(job.result.get("outcome") or "launched"),
            details=dict(job.result),
        )


class JobState:
    """What reconciliation observes about a launched job."""

    ACTIVE = "active"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    MISSING = "missing"
    UNKNOWN = "unknown"

    GONE = frozenset({SUCCEEDED, FAILED, MISSING})


class Launcher(Protocol):
    name: str

    def launch(self, request: LaunchRequest) -> Launched:
        """Start the job; raise `LaunchError` when it could not be started."""
        ...

    def abort(self, launched: Launched) -> None:
        """Best effort: stop a job whose claim turned out stale (its run was cancelled)."""
        ...

    def observe(self, job: RunnerJob) -> str:
        """One of `JobState`'s values, for reconciliation."""
        ...
