"""Builders for session tests: turn requests through the real admission service."""

from __future__ import annotations

from typing import Any

from agentrun.locks import LockKey, advisory_xact_lock
from sessions.services.admission import admit_turn, admit_turn_locked
from sessions.turns import Admission, TurnRequest
from tests.builders import run_spec


def turn_request(session_id: str, text: str = "hello", **overrides: Any) -> TurnRequest:
    values: dict[str, Any] = {
        "session_id": session_id,
        "tenant_id": "tenant-a",
        "spec": run_spec(session_ref={"session_id": session_id, "metadata": {}}),
        "payload": {"text": text},
        "dispatch": None,
    }
    values.update(overrides)
    return TurnRequest(**values)


def admit(session_id: str, text: str = "hello", **overrides: Any) -> Admission:
    return admit_turn(request=turn_request(session_id, text, **overrides))


def admit_in_open_transaction(session_id: str, text: str = "hello") -> Admission:
    """`admit` inside the caller's transaction (which keeps its locks until it commits)."""
    advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, session_id)
    return admit_turn_locked(request=turn_request(session_id, text))


def turn_body(text: str = "hello", **command: Any) -> dict[str, Any]:
    return {
        "run": {
            "project_id": "proj-1",
            "workspace_ref": {"path": "/work/repo"},
            "provider_id": "openai",
            "backend_profile": "scripted",
        },
        "command": {"payload": {"text": text}, "dispatch": None, **command},
    }
