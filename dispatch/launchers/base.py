"""The launcher interface: what the dispatch step needs from a way of starting runners.

A launcher does I/O only (a subprocess, a Kubernetes API call). It never touches the
database: the dispatch step issues the runner key before and records the outcome after,
each in its own short transaction, so no transaction is open while a launcher runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

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
