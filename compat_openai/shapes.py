"""Sessions and turns in the SDK's shapes (`AgentSession`, `Turn`, `TokenUsage`, list pages).

Pure functions over rows the selectors read. Timestamps are Unix seconds, as the SDK
declares them. What agentrun has no notion of gets the SDK's neutral value: no tools, no
subagents, `service_tier` as sent (default `auto`), `text` format `text`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from compat_openai.models import AgentSessionProfile
from runs.control_models import Approval
from runs.models import Command, Run

TURN_STATUS = {
    "pending": "queued",
    "acknowledged": "in_progress",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "cancelled",
}
# agentrun failure kind → the SDK's `SessionTurnError.code`.
ERROR_CODES = {
    "timeout": "request_timeout",
    "budget-exceeded": "usage_limit_exceeded",
    "schema-invalid": "invalid_request",
    "backend-failed": "server_error",
    "infra-failed": "internal_error",
}


def seconds(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def usage_of(payloads: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The sum of `token_usage` payloads as the SDK's `TokenUsage`; None for none."""
    totals = dict.fromkeys(("input", "cached", "output", "reasoning", "total"), 0)
    seen = False
    for payload in payloads:
        seen = True
        for name, key in (
            ("input", "input_tokens"),
            ("cached", "cached_input_tokens"),
            ("output", "output_tokens"),
            ("reasoning", "reasoning_output_tokens"),
            ("total", "total_tokens"),
        ):
            value = payload.get(key)
            totals[name] += value if isinstance(value, int) and not isinstance(value, bool) else 0
    if not seen:
        return None
    return {
        "input_tokens": totals["input"],
        "input_tokens_details": {"cached_tokens": totals["cached"]},
        "output_tokens": totals["output"],
        "output_tokens_details": {"reasoning_tokens": totals["reasoning"]},
        "total_tokens": totals["total"] or totals["input"] + totals["output"],
    }


def agent_id_of(profile: AgentSessionProfile) -> str:
    """agentrun has no saved agents: a session's agent is named after its backend."""
    return f"agent_{profile.session.backend_profile}"


def agent_of(profile: AgentSessionProfile) -> dict[str, Any]:
    agent = profile.agent
    reasoning = agent.get("reasoning") or {}
    return {
        "id": agent_id_of(profile),
        "name": None,
        "model": agent.get("model"),
        "instructions": agent.get("instructions"),
        "multi_agent": {"enabled": False, "max_concurrent_subagents": None},
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "service_tier": agent.get("service_tier") or "auto",
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tools": [],
        "compaction": None,
        "experimental": None,
    }


def environment_of(profile: AgentSessionProfile) -> dict[str, Any]:
    environment = profile.environment
    return {
        "type": "self_hosted",
        "id": f"env_{profile.pk}",
        "workspace_directory": environment.get("workspace_directory"),
        "capability_directories": environment.get("capability_directories") or [],
        # agentrun's runners are dispatched by the server: there is no exec-server to join.
        "remote_url": "",
    }


def session_of(
    profile: AgentSessionProfile,
    *,
    usage: dict[str, Any] | None,
    required_actions: list[dict[str, Any]],
    status: str | None = None,
) -> dict[str, Any]:
    """The `AgentSession`. `status` overrides the current one (a stream event shows the
    session as it was at that event: idle after its turn ended)."""
    session = profile.session
    current = (
        "requires_action"
        if required_actions
        else "in_progress"
        if session.has_active_turn
        else "idle"
    )
    return {
        "id": session.session_id,
        "object": "agent.session",
        "agent": agent_of(profile),
        "created_at": seconds(session.created_at),
        "last_active_at": seconds(session.last_activity_at or session.updated_at),
        "environment": environment_of(profile),
        "error": None,
        "metadata": profile.metadata,
        "required_actions": required_actions,
        "status": status or current,
        "usage": usage,
        "vault_ids": profile.vault_ids,
        "prompt_cache_options": profile.prompt_cache_options,
        "review": profile.review if profile.review != "none" else None,
    }


def turn_of(
    command: Command,
    run: Run,
    *,
    agent_id: str,
    usage: dict[str, Any] | None,
    waiting: bool = False,
) -> dict[str, Any]:
    """The `Turn` of a turn command (its run carries the outcome)."""
    status = TURN_STATUS.get(command.state, "in_progress")
    if status == "in_progress" and waiting:
        status = "waiting"
    if status == "queued" and run.status == "running":
        status = "in_progress"
    error = None
    if status == "failed":
        error = {
            "code": ERROR_CODES.get(run.failure_kind or "", "server_error"),
            "message": run.failure_message or run.failure_kind or "the turn failed",
        }
    return {
        "id": command.id,
        "object": "agent.session.turn",
        "agent_id": agent_id,
        "session_id": run.session_id,
        "status": status,
        "created_at": seconds(command.created_at),
        "started_at": seconds(command.acknowledged_at),
        "completed_at": seconds(command.updated_at) if command.is_terminal else None,
        "error": error,
        "subagent_id": None,
        "usage": usage,
        "prompt_cache_options": None,
    }


def required_action_of(approval: Approval) -> dict[str, Any]:
    """A pending approval as an `mcp_approval_request` (the SDK's approval that a person
    answers): `request_id` is the approval's id, `turn_id` its turn command's."""
    return {
        "type": "mcp_approval_request",
        "request_id": approval.id,
        "turn_id": approval.command_id,
        "request": {
            "type": "mcp_tool_call",
            "server_label": "agentrun",
            "name": approval.kind,
            "arguments": approval.details,
            "message": approval.summary,
        },
    }


def page_of(data: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """A cursor page as the SDK's `SyncCursorPage` reads it (`after` = the last id)."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
