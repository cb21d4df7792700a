"""Codex items as agentrun event payloads: pure functions, no process and no I/O.

Each payload the turn emits also carries `thread_id`, `turn_id` and `command_id`:
  commandExecution started → tool_call {call_id, tool: "shell", arguments {command, cwd}};
  commandExecution completed → tool_output {call_id, output, exit_code, status}
  (mcpToolCall / dynamicToolCall / webSearch map to the same pair);
  fileChange completed → file_change {item_id, status, changes [{path, kind, diff}]}.
Every string is clipped to `MAX_TEXT`, because the API caps an event's payload at 1 MiB.
"""

from __future__ import annotations

import json
from typing import Any

MAX_TEXT = 200_000  # per string in an event: payloads are capped at 1 MiB by the API


def text_input(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "text_elements": []}


def clip(text: Any) -> Any:
    if isinstance(text, str) and len(text) > MAX_TEXT:
        return text[:MAX_TEXT] + f"\n[… {len(text) - MAX_TEXT} characters cut by agentrun]"
    return text


def tool_call(item: dict[str, Any]) -> dict[str, Any] | None:
    kind, call_id = item.get("type"), item.get("id")
    if kind == "commandExecution":
        arguments = {"command": item.get("command"), "cwd": item.get("cwd")}
        return {"call_id": call_id, "tool": "shell", "arguments": arguments}
    if kind == "mcpToolCall":
        tool = f"{item.get('server')}/{item.get('tool')}"
        return {"call_id": call_id, "tool": tool, "arguments": item.get("arguments")}
    if kind == "dynamicToolCall":
        return {"call_id": call_id, "tool": item.get("tool"), "arguments": item.get("arguments")}
    if kind == "webSearch":
        return {"call_id": call_id, "tool": "web_search", "arguments": {"query": item.get("query")}}
    return None


def tool_output(item: dict[str, Any]) -> dict[str, Any] | None:
    kind, status = item.get("type"), item.get("status")
    if kind == "commandExecution":
        output, exit_code = item.get("aggregatedOutput") or "", item.get("exitCode")
    elif kind == "mcpToolCall":
        output = json.dumps(item.get("error") or item.get("result"))
        exit_code = 0 if status == "completed" else 1
    elif kind == "dynamicToolCall":
        output = json.dumps(item.get("contentItems"))
        exit_code = 0 if item.get("success") else 1
    elif kind == "webSearch":
        output, exit_code = json.dumps(item.get("results")), 0
    else:
        return None
    return {
        "call_id": item.get("id"),
        "output": clip(output),
        "exit_code": exit_code,
        "status": status,
    }


def file_changes(item: dict[str, Any]) -> list[dict[str, Any]]:
    """A fileChange item's changes, each {path, kind, diff}."""
    return [
        {
            "path": c.get("path"),
            "kind": (c.get("kind") or {}).get("type"),
            "diff": clip(c.get("diff")),
        }
        for c in item.get("changes") or []
    ]
