"""The input events of `sessions.events.create`, parsed: what `services.events` applies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Message:
    """`agent.session.input.message`: a turn when the session is idle, a steer when busy.
    `extra`: agentrun's `agentrun_payload` extension, more keys of the command payload
    (for example the scripted backend's test modes)."""

    text: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def payload(self) -> dict[str, Any]:
        return {**self.extra, "text": self.text}


@dataclass(frozen=True)
class Cancel:
    """`agent.session.input.cancel`: cancel the active turn (nothing when there is none)."""


@dataclass(frozen=True)
class ApprovalAnswer:
    """`agent.session.input.mcp_approval_request_result`: a person's decision."""

    request_id: str
    decision: str  # approve | deny | cancel


Action = Message | Cancel | ApprovalAnswer
