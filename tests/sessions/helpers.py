"""Builders for session tests: turn requests through the real admission service."""

from __future__ import annotations

from typing import Any

from sessions.services.admission import Admission, TurnRequest, admit_turn
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
