"""The `scripted` backend: deterministic, dependency-free, for tests and demos.

It echoes the turn: streams `Echo: <text>` as `agent_message_delta`s, runs an `echo`
tool (`tool_call` / `tool_output`), ends with an `agent_message` and `token_usage`.
Steers received during the turn are echoed into the output (`[steer] <text>`); an
interrupt ends the turn `cancelled`. `payload.scripted` switches the behaviour:

- `{"mode": "long", "ticks": 20, "tick_ms": 200}` streams ticks before answering;
- `{"mode": "hang"}` waits until interrupted;
- `{"mode": "fail", "message": "…"}` fails the turn (`backend-failed`).
"""

from __future__ import annotations

import uuid
from typing import Any

from runner.backends.base import TurnControl, TurnInput, TurnOutcome


class ScriptedBackend:
    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run

    def close(self) -> None:
        """Nothing to release: the scripted backend holds no process or connection."""

    def run_turn(self, turn: TurnInput, control: TurnControl) -> TurnOutcome:
        thread_id = turn.thread_id or f"thr_scripted_{uuid.uuid4().hex[:16]}"
        turn_id = f"turn_scripted_{uuid.uuid4().hex[:16]}"
        script = turn.payload.get("scripted") or {}
        mode = script.get("mode", "echo")
        ids = {"thread_id": thread_id, "turn_id": turn_id, "command_id": turn.command_id}
        steered: list[str] = []
        if mode == "fail":
            message = str(script.get("message", "scripted failure"))
            control.emit("error", {**ids, "message": message})
            return TurnOutcome("failed", "backend-failed", message, thread_id, turn_id)
        ticks = 10**9 if mode == "hang" else int(script.get("ticks", 0) if mode == "long" else 0)
        for tick in range(ticks):
            if control.interrupted.wait(float(script.get("tick_ms", 200)) / 1000):
                return TurnOutcome("cancelled", "cancelled", "interrupted", thread_id, turn_id)
            self._take_steers(control, steered, ids)
            if mode == "long":
                control.emit("agent_message_delta", {**ids, "delta": f"tick{tick} "})
        if control.interrupted.is_set():
            return TurnOutcome("cancelled", "cancelled", "interrupted", thread_id, turn_id)
        self._take_steers(control, steered, ids)
        self._answer(turn, control, steered, ids)
        return TurnOutcome("completed", None, None, thread_id, turn_id)

    def _take_steers(self, control: TurnControl, steered: list[str], ids: dict[str, Any]) -> None:
        while (text := control.next_steer()) is not None:
            steered.append(text)
            control.emit("agent_message_delta", {**ids, "delta": f"[steer] {text} "})

    def _answer(
        self, turn: TurnInput, control: TurnControl, steered: list[str], ids: dict[str, Any]
    ) -> None:
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        control.emit(
            "tool_call",
            {**ids, "call_id": call_id, "tool": "echo", "arguments": {"text": turn.text}},
        )
        control.emit(
            "tool_output", {**ids, "call_id": call_id, "output": turn.text, "exit_code": 0}
        )
        text = " ".join([f"Echo: {turn.text}", *(f"[steer] {s}" for s in steered)])
        for word in text.split(" "):
            control.emit("agent_message_delta", {**ids, "delta": word + " "})
        control.emit("agent_message", {**ids, "text": text})
        words = len(text.split())
        control.emit(
            "token_usage",
            {
                **ids,
                "input_tokens": len(turn.text.split()),
                "output_tokens": words,
                "total_tokens": words + len(turn.text.split()),
            },
        )
