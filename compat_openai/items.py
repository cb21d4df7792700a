"""A session's items, in the SDK's shapes (`AgentSessionItem`), made from agentrun's output
events: what `items.list`, `turns.items.list` and the stream's `item.*` events show.

- `user_message` → a `message` of role `user` (`input_text`); a steer's message too;
- `agent_message` → a `message` of role `assistant` (`output_text`);
- `tool_call` of the `shell` tool → `command_execution`, completed by its `tool_output`
  (output, exit code); any other tool → `mcp_call` with `server_label` `agentrun`;
- `file_change` → `mcp_call` named `file_change` (the SDK has no file-change item).

An item's id is the id of the event that opened it (`evt_…`); its `turn_id` is the turn
(command) of the run it belongs to.
"""

from __future__ import annotations

import shlex
from typing import Any

from runs.models import Event

# The events that open an item; `tool_output` completes a `tool_call`'s item.
ITEM_EVENT_TYPES = ("user_message", "agent_message", "tool_call", "file_change")
SERVER_LABEL = "agentrun"
# Message events → (the SDK message's role, its content part type).
MESSAGE_ROLES = {
    "user_message": ("user", "input_text"),
    "agent_message": ("assistant", "output_text"),
}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _command_line(arguments: Any) -> str:
    command = arguments.get("command") if isinstance(arguments, dict) else arguments
    if isinstance(command, list):
        return shlex.join(str(part) for part in command)
    return _text(command)


def tool_status(output: dict[str, Any] | None, *, turn_over: bool) -> str:
    """`in_progress` until the output; then `completed`, or `failed` (a non-zero exit or a
    failed status), `incomplete` (abandoned); an open call of an ended turn: incomplete."""
    if output is None:
        return "incomplete" if turn_over else "in_progress"
    status = output.get("status")
    if status in ("incomplete", "failed"):
        return str(status)
    exit_code = output.get("exit_code")
    return "failed" if isinstance(exit_code, int) and exit_code != 0 else "completed"


def item_of(
    event: Event, turn_id: str, *, output: dict[str, Any] | None = None, turn_over: bool = False
) -> dict[str, Any] | None:
    """The item an event opens (with its tool output, if any), or None for other events."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    base = {"id": event.id, "turn_id": turn_id}
    if event.type in MESSAGE_ROLES:
        role, part = MESSAGE_ROLES[event.type]
        content = [{"type": part, "text": _text(payload.get("text"))}]
        return {**base, "type": "message", "role": role, "content": content,
                "status": "completed", "phase": None}  # fmt: skip
    if event.type == "tool_call":
        return _tool_item(base, payload, output, turn_over)
    if event.type == "file_change":
        failed = payload.get("status") in ("failed", "declined")
        return {
            **base,
            "type": "mcp_call",
            "server_label": SERVER_LABEL,
            "name": "file_change",
            "arguments": {"changes": payload.get("changes")},
            "output": None,
            "error": "file change not applied" if failed else None,
            "status": "failed" if failed else "completed",
        }
    return None


def _tool_item(
    base: dict[str, Any], payload: dict[str, Any], output: dict[str, Any] | None, turn_over: bool
) -> dict[str, Any]:
    arguments = payload.get("arguments")
    status = tool_status(output, turn_over=turn_over)
    out = output or {}
    if payload.get("tool") == "shell":
        cwd = arguments.get("cwd") if isinstance(arguments, dict) else None
        return {
            **base,
            "type": "command_execution",
            "command": _command_line(arguments),
            "cwd": cwd,
            "duration_ms": None,
            "exit_code": out.get("exit_code"),
            "output": out.get("output"),
            "status": status,
        }
    return {
        **base,
        "type": "mcp_call",
        "server_label": SERVER_LABEL,
        "name": _text(payload.get("tool")),
        "arguments": arguments,
        "output": out.get("output"),
        "error": out.get("error"),
        "status": status,
    }


def items_of(
    events: list[Event],
    outputs: dict[tuple[str, str], dict[str, Any]],
    turns: dict[str, str],
    ended: set[str],
) -> list[dict[str, Any]]:
    """The items of `events` (item-opening events, in order), each tool call with its
    output from `outputs` ((run id, call id) → payload); `turns`: run id → turn id;
    `ended`: the runs whose turn is over."""
    found = []
    for event in events:
        call_id = str(event.payload.get("call_id")) if isinstance(event.payload, dict) else ""
        item = item_of(
            event,
            turns.get(event.run_id, ""),
            output=outputs.get((event.run_id, call_id)),
            turn_over=event.run_id in ended,
        )
        if item is not None:
            found.append(item)
    return found
