"""agentrun's session events as the SDK's stream events (`AgentSessionEvent`).

One agentrun event becomes zero or more SDK events (sync; the stream calls it in a read
slot, since some need a row: the turn, the session snapshot, the tool call an output
completes):

- `user_message` of a turn → `agent.session.turn.created`, `agent.session.turn.item.added`;
  of a steer → `agent.session.turn.item.added`;
- `backend_status` `run-claimed` → `agent.session.turn.in_progress`,
  `agent.session.in_progress`;
- `agent_message_delta` → `agent.session.turn.output_text.delta`;
- `agent_message` → `agent.session.turn.output_text.done`, `agent.session.turn.item.done`;
- `tool_call` → `agent.session.turn.item.added` (in progress); `tool_output` and
  `file_change` → `agent.session.turn.item.done`;
- `approval_requested` → `agent.session.requires_action`; `approval_resolved` →
  `agent.session.in_progress`;
- `error` → `error`;
- `terminal_status` → `agent.session.turn.completed` / `failed` / `cancelled`, then
  `agent.session.idle`.

Everything else (logs, token usage, other backend statuses) maps to nothing. A snapshot of
the session or turn is read when the event is streamed, with the status it had at that
event (a replayed `turn.created` says `queued`, a `session.idle` says `idle`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compat_openai import items as item_shapes
from compat_openai import selectors
from runs.models import Command, Event

SdkEvent = tuple[str, dict[str, Any]]
TERMINAL_TYPES = {
    "completed": "agent.session.turn.completed",
    "failed": "agent.session.turn.failed",
    "blocked": "agent.session.turn.failed",
    "cancelled": "agent.session.turn.cancelled",
}


def _turn_command(run_id: str) -> Command | None:
    return Command.objects.select_related("run").filter(run_id=run_id, type="turn").first()


def _output_index(run_id: str, seq: int) -> int:
    """How many output items the run opened before `seq` (the SDK's `output_index`)."""
    opening = ("agent_message", "tool_call", "file_change")
    return Event.objects.filter(run_id=run_id, type__in=opening, seq__lt=seq).count()


def _turn_event(
    kind: str, session_id: str, command: Command, status: str | None = None
) -> SdkEvent:
    profile = selectors.live_profile_any(session_id)
    turn = selectors.turn_shapes(profile, [command])[0]
    if status is not None:
        turn["status"] = status
    body = {"session_id": session_id, "turn_id": command.id, "turn": turn}
    if kind in TERMINAL_TYPES.values():
        body["usage"] = turn["usage"]
    return kind, body


def _session_event(kind: str, session_id: str, status: str) -> SdkEvent:
    profile = selectors.live_profile_any(session_id)
    snapshot = selectors.session_shapes([profile])[0]
    if status != "requires_action":
        snapshot["status"] = status
    return kind, {"session": snapshot}


def sdk_events(data: dict[str, Any], *, session_id: str) -> list[SdkEvent]:
    """The SDK events of one agentrun event (`data` as the events API shows it)."""
    handler = _HANDLERS.get(data["type"])
    command = _turn_command(data["run_id"]) if handler is not None else None
    if handler is None or command is None:
        return []
    payload = data.get("payload") if isinstance(data.get("payload"), dict) else {}
    return handler(_At(data, payload or {}, session_id, command))


@dataclass(frozen=True)
class _At:
    """One agentrun event being mapped: its data, payload, session and turn command."""

    data: dict[str, Any]
    payload: dict[str, Any]
    session_id: str
    command: Command

    @property
    def base(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "turn_id": self.command.id}

    @property
    def run_id(self) -> str:
        return str(self.data["run_id"])


def _user_message(at: _At) -> list[SdkEvent]:
    item = item_shapes.item_of(Event.objects.get(pk=at.data["id"]), at.command.id)
    added = ("agent.session.turn.item.added", {**at.base, "item": item, "output_index": None})
    if at.payload.get("command_type") != "turn":
        return [added]
    return [_turn_event("agent.session.turn.created", at.session_id, at.command, "queued"), added]


def _backend_status(at: _At) -> list[SdkEvent]:
    if at.payload.get("phase") != "run-claimed":
        return []
    return [
        _turn_event("agent.session.turn.in_progress", at.session_id, at.command, "in_progress"),
        _session_event("agent.session.in_progress", at.session_id, "in_progress"),
    ]


def _delta(at: _At) -> list[SdkEvent]:
    item_id = str(at.payload.get("item_id") or f"msg_{at.run_id}")
    delta = {"item_id": item_id, "content_index": 0, "delta": str(at.payload.get("delta") or "")}
    index = _output_index(at.run_id, at.data["seq"])
    return [("agent.session.turn.output_text.delta", {**at.base, **delta, "output_index": index})]


def _error(at: _At) -> list[SdkEvent]:
    message = str(at.payload.get("message") or "error")
    error = {"message": message, "type": "server_error", "code": None, "param": None}
    return [("error", {"session_id": at.session_id, "error": error})]


def _terminal(at: _At) -> list[SdkEvent]:
    ended = TERMINAL_TYPES.get(str(at.payload.get("terminal_status")), TERMINAL_TYPES["failed"])
    return [
        _turn_event(ended, at.session_id, at.command),
        _session_event("agent.session.idle", at.session_id, "idle"),
    ]


def _approval(kind: str, status: str) -> Callable[[_At], list[SdkEvent]]:
    return lambda at: [_session_event(kind, at.session_id, status)]


def _item(at: _At) -> list[SdkEvent]:
    kind, run_id, turn_id = at.data["type"], at.run_id, at.command.id
    if kind == "tool_output":
        call = Event.objects.filter(
            run_id=run_id, type="tool_call", payload__call_id=at.payload.get("call_id")
        ).first()
        if call is None:
            return []
        item = item_shapes.item_of(call, turn_id, output=at.payload)
        index = _output_index(run_id, call.seq)
        return [("agent.session.turn.item.done", {**at.base, "item": item, "output_index": index})]
    item = item_shapes.item_of(Event.objects.get(pk=at.data["id"]), turn_id)
    assert item is not None
    placed = {**at.base, "output_index": _output_index(run_id, at.data["seq"])}
    if kind == "tool_call":
        return [("agent.session.turn.item.added", {**placed, "item": item})]
    if kind == "file_change":
        return [("agent.session.turn.item.done", {**placed, "item": item})]
    text = item["content"][0]["text"]
    done = {**placed, "item_id": item["id"], "content_index": 0, "text": text}
    return [
        ("agent.session.turn.output_text.done", done),
        ("agent.session.turn.item.done", {**placed, "item": item}),
    ]


_HANDLERS: dict[str, Callable[[_At], list[SdkEvent]]] = {
    "user_message": _user_message,
    "backend_status": _backend_status,
    "agent_message_delta": _delta,
    "agent_message": _item,
    "tool_call": _item,
    "tool_output": _item,
    "file_change": _item,
    "approval_requested": _approval("agent.session.requires_action", "requires_action"),
    "approval_resolved": _approval("agent.session.in_progress", "in_progress"),
    "error": _error,
    "terminal_status": _terminal,
}
