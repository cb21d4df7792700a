"""The terminal client: drive a session over the HTTP API (`python -m runner turn ...`).

    agentrun turn SESSION "fix the flaky test" [--backend scripted] [--tail]
    agentrun steer SESSION "also update the changelog"
    agentrun cancel SESSION
    agentrun tail SESSION          # follow the session's output (long-poll)

It uses a client key (role `client`), not a runner key; `cli.py` parses the arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TextIO

from runner.client import ApiClient


def drive_session(api: ApiClient, options: dict[str, Any], out: TextIO) -> None:
    """One action on a session, then (for `tail`, or `--tail`) follow its output.
    Errors: `ApiError`, `ApiUnavailable` from the client."""
    session, action = options["session"], options["action"]
    if action == "turn":
        _turn(api, session, options, out)
    elif action == "steer":
        answer = api.post(f"/sessions/{session}/steer", {"payload": {"text": options["text"]}})
        _print(out, answer)
    elif action == "cancel":
        _print(out, api.post(f"/sessions/{session}/cancel", {}))
    if action == "tail" or options["tail"]:
        tail_session(api, session, out)


def _turn(api: ApiClient, session: str, options: dict[str, Any], out: TextIO) -> None:
    body = {
        "run": {
            "project_id": options["project"],
            "workspace_ref": {"path": options["workspace"]},
            "provider_id": "cli",
            "backend_profile": options["backend"],
        },
        "command": {"payload": {"text": options["text"]}},
    }
    answer = api.post(f"/sessions/{session}/turns", body)
    out.write(
        f"{answer['disposition']}: run {answer['run']['id']}, turn {answer['command']['id']}\n"
    )


def tail_session(api: ApiClient, session: str, out: TextIO) -> None:
    """Follow the session's current run until its terminal status."""
    summary = api.get(f"/sessions/{session}")
    run_id = summary["active_run_id"] or summary["last_run_id"]
    after = 0
    while run_id:
        page = api.get(f"/runs/{run_id}/events", after_seq=after, limit=200, wait=25)
        for event in page["items"]:
            if event["type"] in RENDERERS:
                out.write(render(event) + "\n")
            if event["type"] == "terminal_status":
                return
        after = page["next_after_seq"]


def _print(out: TextIO, answer: Any) -> None:
    out.write(json.dumps(answer, indent=2) + "\n")


def _text(payload: dict[str, Any]) -> Any:
    return payload.get("text") or payload.get("output") or payload.get("message")


def _tool_call(payload: dict[str, Any]) -> str:
    return f"{payload.get('tool')} {json.dumps(payload.get('arguments'))}"


def _terminal(payload: dict[str, Any]) -> Any:
    return payload.get("terminal_status")


# What the tail shows is what it knows how to print: one renderer per event type. The
# server's `sessions.selectors.OUTPUT_EVENT_TYPES` names the same person-readable set for
# `GET /sessions/{id}/output`, but that page cannot wait, so the tail reads the run's
# long-polled events and keeps its own table (the runner must not import the server).
RENDERERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "user_message": _text,
    "agent_message": _text,
    "tool_call": _tool_call,
    "tool_output": _text,
    "file_change": _text,
    "error": _text,
    "terminal_status": _terminal,
}


def render(event: dict[str, Any]) -> str:
    text = RENDERERS.get(event["type"], _text)(event["payload"])
    return f"[{event['seq']:>4}] {event['type']}: {text}"
