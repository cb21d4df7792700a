"""Shared pieces of the session tests: HTTP paths, runner moves and snapshots.

State is made through the real services (admission, claim, finish) or over HTTP.
"""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.test import APIClient

from agentrun.auth import issue_api_key
from dispatch.models import RunnerDispatchIntent
from runs.control_models import CancelRequest
from runs.models import Command, Event, Run
from runs.services.command_lifecycle import ack_command, finish_command
from runs.services.lifecycle import claim_run, finish_run
from runs.services.terminal import TurnResult
from sessions.models import Session, SessionReadCursor
from sessions.services.lifecycle import SessionFields, upsert_session
from tests.builders import api_client

API = "/api/v1"


def clients(count: int, *, tenant_id: str = "tenant-a") -> list[APIClient]:
    """`count` API clients sharing one client key, one per thread of a race."""
    issued = issue_api_key(tenant_id=tenant_id, role="client")
    return [api_client(issued.secret) for _ in range(count)]


def idle_session(session_id: str, *, tenant_id: str = "tenant-a", **fields: Any) -> Session:
    values: dict[str, Any] = {"project_id": "proj-1", "backend_profile": "scripted", **fields}
    return upsert_session(
        session_id=session_id, tenant_id=tenant_id, fields=SessionFields(**values)
    )


def post_turn(client: APIClient, session_id: str, body: dict[str, Any]) -> Response:
    return client.post(f"{API}/sessions/{session_id}/turns", body, format="json")  # type: ignore[no-any-return]


def claim(run_id: str, *, runner_id: str = "runner-1") -> Run:
    return claim_run(run_id=run_id, runner_id=runner_id, lease_ms=60_000)


def finish_turn(run: Run, command_id: str, *, runner_id: str = "runner-1", **result: Any) -> None:
    """The runner acknowledges the turn and reports it finished (default: completed)."""
    ack_command(command_id=command_id, runner_id=runner_id, lease_epoch=run.lease_epoch)
    finish_command(
        command_id=command_id,
        runner_id=runner_id,
        lease_epoch=run.lease_epoch,
        result=TurnResult(**{"terminal_status": "completed", **result}),
    )


def finish_whole_run(run: Run, *, runner_id: str = "runner-1", **result: Any) -> Run:
    return finish_run(
        run_id=run.id,
        runner_id=runner_id,
        lease_epoch=run.lease_epoch,
        result=TurnResult(**{"terminal_status": "completed", **result}),
    )


def phases(run_id: str) -> list[str]:
    """The run's events in order: the phase of a `backend_status`, else the type."""
    return [
        event.payload.get("phase", "") if event.type == "backend_status" else event.type
        for event in Event.objects.filter(run_id=run_id).order_by("seq")
    ]


def written() -> tuple[int, ...]:
    """Row counts of everything a session write could add."""
    models = (Session, SessionReadCursor, Run, Command, Event, CancelRequest, RunnerDispatchIntent)
    return tuple(model.objects.count() for model in models)


def session(session_id: str) -> Session:
    return Session.objects.get(pk=session_id)
