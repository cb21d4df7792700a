"""A mock of the OpenAI Responses API for driving the real `codex app-server` in tests.

Stdlib only (`http.server`), so it runs under any Python inside the loopback-only network
namespace next to codex. `POST /v1/responses` answers with an SSE stream shaped as recorded
in /work/shared/codex-app-server.md. What it answers is scripted by the newest user prompt:

- `run: <cmd>`       -> a `function_call` of `exec_command` with `{"cmd": <cmd>}`;
- `escalate: <cmd>`  -> the same, asking to run outside the sandbox (`require_escalated`),
                        which makes codex ask the client for approval under `on-request`;
- `tick`             -> a slow stream, one `tick<N> ` delta every TICK_S seconds, for steer
                        and interrupt tests;
- `steer: <text>`    -> (the newest prompt is a steer) `steered: <text>`;
- `fail`             -> HTTP 500;
- anything else      -> `hello from mock, prompt <N>`, N = user prompts in the history (so a
                        resumed thread shows that its earlier turns came along).

A request whose last input item is a `function_call_output` is answered with
`tool said: <output>`, the command's output as codex reported it to the model.

Two ways to run it:
- `mock_responses.py --port P [--dump DIR]`: serve until SIGTERM or until the parent exits;
- `mock_responses.py --port P [--dump DIR] --exec -- CMD...`: start the server as a child,
  wait until it accepts connections, then exec CMD (codex) in this process, so the server
  lives exactly as long as codex's process group and dies with its parent.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TICK_S = 0.2
TICKS = 60
ESCALATION_REASON = "mock wants to run outside the sandbox"


# ---- what to answer ------------------------------------------------------------------


def _text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def user_prompts(body: dict[str, Any]) -> list[str]:
    """The user's prompts in the request, without codex's own `<environment_context>` and
    `<turn_aborted>` messages."""
    prompts = []
    for item in body.get("input", []):
        if item.get("type") == "message" and item.get("role") == "user":
            text = _text_of(item).strip()
            if text and not text.startswith("<"):
                prompts.append(text)
    return prompts


def plan(body: dict[str, Any]) -> tuple[str, Any]:
    """(kind, argument) for a request: ("text", [deltas]), ("call", args), ("ticks", None),
    or ("fail", None)."""
    items = body.get("input", [])
    if items and items[-1].get("type") == "function_call_output":
        output = items[-1].get("output")
        if not isinstance(output, str):
            output = json.dumps(output)
        return "text", ["tool said: ", output.split("Output:\n", 1)[-1].strip()]
    prompts = user_prompts(body)
    prompt = prompts[-1] if prompts else ""
    if prompt.startswith("run: "):
        return "call", {"cmd": prompt[len("run: ") :], "login": False}
    if prompt.startswith("escalate: "):
        return "call", {
            "cmd": prompt[len("escalate: ") :],
            "login": False,
            "sandbox_permissions": "require_escalated",
            "justification": ESCALATION_REASON,
        }
    if prompt == "tick":
        return "ticks", None
    if prompt.startswith("steer: "):
        return "text", ["steered: ", prompt[len("steer: ") :]]
    if prompt == "fail":
        return "fail", None
    return "text", ["hello ", "from ", "mock", f", prompt {len(prompts)}"]


# ---- SSE -----------------------------------------------------------------------------


def _message_events(deltas: list[str]) -> list[dict[str, Any]]:
    msg_id = f"msg_{uuid.uuid4().hex[:24]}"
    text = "".join(deltas)
    done = {
        "type": "message",
        "role": "assistant",
        "id": msg_id,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[dict[str, Any]] = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**done, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": msg_id,
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "item_id": msg_id,
            "output_index": 0,
            "content_index": 0,
            "delta": delta,
        }
        for delta in deltas
    ]
    events += [
        {
            "type": "response.output_text.done",
            "item_id": msg_id,
            "output_index": 0,
            "content_index": 0,
            "text": text,
        },
        {"type": "response.output_item.done", "output_index": 0, "item": done},
    ]
    return events


def _call_events(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    item = {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex[:24]}",
        "call_id": f"call_{uuid.uuid4().hex[:24]}",
        "name": "exec_command",
        "arguments": json.dumps(arguments),
        "status": "completed",
    }
    return [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]


def _created(response_id: str) -> dict[str, Any]:
    return {"type": "response.created", "response": {"id": response_id, "status": "in_progress"}}


def _completed(response_id: str, prompt_chars: int, output_chars: int) -> dict[str, Any]:
    input_tokens, output_tokens = max(1, prompt_chars // 4), max(1, output_chars // 4)
    return {
        "type": "response.completed",
        "response": {
            "id": response_id,
            "status": "completed",
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        },
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    dump_dir: Path | None = None

    def log_message(self, format: str, *args: Any) -> None:  # quiet: codex reads stderr
        return

    def do_GET(self) -> None:
        self._plain(404, b'{"error":"not found"}')

    def do_POST(self) -> None:
        body_bytes = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.rstrip("/").endswith("/responses"):
            self._plain(404, b'{"error":"not found"}')
            return
        body = json.loads(body_bytes or b"{}")
        self._dump(body)
        kind, argument = plan(body)
        if kind == "fail":
            self._plain(500, b'{"error":{"message":"mock failure","type":"server_error"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        response_id = f"resp_{uuid.uuid4().hex[:24]}"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._send(_created(response_id))
            if kind == "ticks":
                argument = [f"tick{n} " for n in range(TICKS)] + ["done ticking"]
            events = _message_events(argument) if kind != "call" else _call_events(argument)
            if kind == "ticks":
                self._tick(events)
                events = []
            for event in events:
                self._send(event)
            self._send(_completed(response_id, len(body_bytes) // 10, len(json.dumps(argument))))
        self.close_connection = True

    def _tick(self, events: list[dict[str, Any]]) -> None:
        """Send a message's events with a pause before each delta: a slow stream that a
        steer or an interrupt cuts (codex then drops the connection: a broken pipe here)."""
        for event in events:
            if event["type"] == "response.output_text.delta":
                time.sleep(TICK_S)
            self._send(event)

    def _send(self, event: dict[str, Any]) -> None:
        self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        self.wfile.flush()

    def _plain(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _dump(self, body: dict[str, Any]) -> None:
        if self.dump_dir is None:
            return
        name = f"{time.monotonic_ns()}-{uuid.uuid4().hex[:6]}.json"
        (self.dump_dir / name).write_text(json.dumps({"path": self.path, "body": body}))


# ---- process lifecycle ---------------------------------------------------------------


def _die_with_parent() -> None:
    """SIGTERM this process when its parent (codex) exits, and check again by polling."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    if parent == 1:
        sys.exit(0)
    threading.Thread(target=watch, daemon=True).start()


def serve(port: int, dump_dir: Path | None) -> None:
    Handler.dump_dir = dump_dir
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    _die_with_parent()
    server.serve_forever(poll_interval=0.1)


def exec_with_server(port: int, dump_dir: Path | None, command: list[str]) -> None:
    argv = [sys.executable, os.path.abspath(__file__), "--port", str(port)]
    if dump_dir is not None:
        argv += ["--dump", str(dump_dir)]
    # The server's stdout must stay off codex's stdout: that is the JSON-RPC channel.
    subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno())
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("mock Responses server did not start")
            time.sleep(0.02)
    os.execvp(command[0], command)


def main() -> None:
    argv = sys.argv[1:]
    command: list[str] = []
    if "--exec" in argv:
        at = argv.index("--exec")
        argv, command = argv[:at], argv[at + 1 :]
        command = command[1:] if command[:1] == ["--"] else command
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dump", type=Path, default=None)
    args = parser.parse_args(argv)
    if command:
        exec_with_server(args.port, args.dump, command)
    else:
        serve(args.port, args.dump)


if __name__ == "__main__":
    main()
