"""The terminal client: drive a session over the HTTP API (`python -m runner turn ...`).

    agentrun turn SESSION "fix the flaky test" [--backend scripted] [--tail]
    agentrun steer SESSION "also update the changelog"
    agentrun cancel SESSION
    agentrun tail SESSION [--follow]  # follow the session's output (Server-Sent Events)

It uses a client key (role `client`), not a runner key; `cli.py` parses the arguments.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any, TextIO

from runner.client import ApiClient, ApiError, ApiUnavailable
from runner.sse import StreamRefused, messages, open_stream

RECONNECT_FOR_S = 120.0  # a tail gives up after this long without a connection


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
        tail_session(api, session, out, follow=bool(options.get("follow")))


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


def tail_session(api: ApiClient, session: str, out: TextIO, *, follow: bool = False) -> None:
    """Print the session's output from its current run on, over the session stream, until
    that run's terminal status (`follow`: on, across turns, until interrupted).

    A dropped connection (a server restart, a network blip) is resumed with
    `Last-Event-ID`: the server sends what came after the last line printed, so nothing is
    printed twice and nothing is missed."""
    summary = api.get(f"/sessions/{session}")
    run_id = summary["active_run_id"] or summary["last_run_id"]
    if run_id is None and not follow:
        return
    cursor = f"{run_id}:0" if run_id else None  # from the current run's start
    url = f"{api.base_url}/api/v1/sessions/{session}/stream?only=output"
    given_up_at = time.monotonic() + RECONNECT_FOR_S
    attempt = 0
    while True:
        opened = _connect(url, api.key, cursor)
        if opened is None:
            attempt += 1
            if time.monotonic() > given_up_at:
                raise ApiUnavailable(f"the session stream of {session} is unreachable")
            time.sleep(min(2.0, 0.1 * 2**attempt) * random.uniform(0.5, 1))
            continue
        attempt, given_up_at = 0, time.monotonic() + RECONNECT_FOR_S
        connection, response = opened
        try:
            cursor, done = _print_until_end(response, out, cursor, run_id if not follow else None)
        finally:
            connection.close()
        if done:
            return


def _connect(url: str, key: str, cursor: str | None) -> Any:
    """The open stream, or None when the server cannot be reached (or answers 5xx)."""
    try:
        return open_stream(url, headers={"Authorization": f"Bearer {key}"}, last_event_id=cursor)
    except StreamRefused as refused:
        if refused.status < 500:
            raise ApiError(refused.status, _error_body(refused.body)) from refused
    except OSError:
        pass
    return None


def _print_until_end(
    response: Any, out: TextIO, cursor: str | None, end_run: str | None
) -> tuple[str | None, bool]:
    """Print the stream's events; the id of the last one printed, and whether `end_run`'s
    terminal status was (False: the connection dropped; resume after that id)."""
    try:
        for message in messages(response):
            if message is None:
                continue  # a heartbeat
            event = message.json()
            out.write(render(event) + "\n")
            out.flush()
            cursor = message.id
            if event["type"] == "terminal_status" and event["run_id"] == end_run:
                return cursor, True
    except (OSError, ValueError):
        pass
    return cursor, False


def _error_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": {"code": "", "message": raw.decode(errors="replace")[:300]}}


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
# `GET /sessions/{id}/output` and `?only=output` streams; the tail keeps its own table
# (the runner must not import the server).
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
