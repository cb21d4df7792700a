"""The `scripted` backend: deterministic, dependency-free, for tests and demos.

It echoes the turn: streams `Echo: <text>` as `agent_message_delta`s, runs an `echo`
tool (`tool_call` / `tool_output`), ends with an `agent_message` and `token_usage`.
Steers received during the turn are echoed into the output (`[steer] <text>`); an
interrupt ends the turn `cancelled`. `payload.scripted` switches the behaviour:

- `{"mode": "long", "ticks": 20, "tick_ms": 200}` streams ticks before answering; with
  `"usage_per_tick": N` each tick also reports N output tokens (`token_usage`), which is
  how a budget stops a scripted turn midway;
- `{"mode": "hang"}` waits until interrupted;
- `{"mode": "fail", "message": "…"}` fails the turn (`backend-failed`);
- `{"mode": "ask", "command": "…", "kind": "command"}` asks for approval to run the
  command first (under `approval_policy: ask` a person answers through the API), then
  runs it (`tool_output` "ran: …") or says it was denied.
"""

from __future__ import annotations

import uuid
from typing import Any

from runner.backends.base import TurnControl, TurnInput, TurnOutcome, approval_decision
from runner.phases import RunnerPhase


class ScriptedBackend:
    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run
        self.policy: dict[str, Any] = dict(run.get("execution_policy") or {})

    def close(self) -> None:
        """Nothing to release: the scripted backend holds no process or connection."""

    def run_turn(self, turn: TurnInput, control: TurnControl) -> TurnOutcome:
        thread_id = turn.thread_id or f"thr_scripted_{uuid.uuid4().hex[:16]}"
        turn_id = f"turn_scripted_{uuid.uuid4().hex[:16]}"
        script = turn.payload.get("scripted") or {}
        mode = script.get("mode", "echo")
        ids = {"thread_id": thread_id, "turn_id": turn_id, "command_id": turn.command_id}
        steered: list[str] = []
        notes: list[str] = []  # what an approval led to, said in the answer
        used = 0
        if mode == "fail":
            message = str(script.get("message", "scripted failure"))
            control.emit("error", {**ids, "message": message})
            return TurnOutcome("failed", "backend-failed", message, thread_id, turn_id)
        if mode == "ask":
            notes.append(self._ask(script, control, ids))
        ticks = 10**9 if mode == "hang" else int(script.get("ticks", 0) if mode == "long" else 0)
        per_tick = int(script.get("usage_per_tick", 0))
        for tick in range(ticks):
            if control.interrupted.wait(float(script.get("tick_ms", 200)) / 1000):
                return TurnOutcome("cancelled", "cancelled", "interrupted", thread_id, turn_id)
            self._take_steers(control, steered, ids)
            if mode == "long":
                control.emit("agent_message_delta", {**ids, "delta": f"tick{tick} "})
            if per_tick:
                used += per_tick
                self._usage(control, ids, input_tokens=0, output_tokens=per_tick, used=used)
        if control.interrupted.is_set():
            return TurnOutcome("cancelled", "cancelled", "interrupted", thread_id, turn_id)
        self._take_steers(control, steered, ids)
        self._answer(turn, control, [*notes, *(f"[steer] {s}" for s in steered)], ids, used=used)
        return TurnOutcome("completed", None, None, thread_id, turn_id)

    def _ask(self, script: dict[str, Any], control: TurnControl, ids: dict[str, Any]) -> str:
        command = str(script.get("command", "echo hello"))
        kind = str(script.get("kind", "command"))
        details = {"command": command}
        control.emit(
            "backend_status",
            {**ids, "phase": RunnerPhase.APPROVAL_REQUESTED, "kind": kind, "command": command},
        )
        decision = approval_decision(self.policy, control, kind, f"run: {command}", details)
        control.emit(
            "backend_status",
            {**ids, "phase": RunnerPhase.APPROVAL_ANSWERED, "decision": decision},
        )
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        control.emit(
            "tool_call", {**ids, "call_id": call_id, "tool": "shell", "arguments": details}
        )
        approved = decision == "approve"
        output = f"ran: {command}" if approved else f"denied: {command}"
        control.emit(
            "tool_output",
            {**ids, "call_id": call_id, "output": output, "exit_code": 0 if approved else None},
        )
        return output

    def _take_steers(self, control: TurnControl, steered: list[str], ids: dict[str, Any]) -> None:
        while (text := control.next_steer()) is not None:
            steered.append(text)
            control.emit("agent_message_delta", {**ids, "delta": f"[steer] {text} "})

    def _usage(
        self,
        control: TurnControl,
        ids: dict[str, Any],
        *,
        input_tokens: int,
        output_tokens: int,
        used: int,
    ) -> None:
        """One `token_usage` event (this much more), then the turn's total so far to the
        budget check."""
        control.emit(
            "token_usage",
            {
                **ids,
                "model": self.policy.get("model") or "scripted",
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
        )
        control.note_usage(used)

    def _answer(
        self,
        turn: TurnInput,
        control: TurnControl,
        notes: list[str],
        ids: dict[str, Any],
        *,
        used: int,
    ) -> None:
        call_id = f"call_{uuid.uuid4().hex[:12]}"
        control.emit(
            "tool_call",
            {**ids, "call_id": call_id, "tool": "echo", "arguments": {"text": turn.text}},
        )
        control.emit(
            "tool_output", {**ids, "call_id": call_id, "output": turn.text, "exit_code": 0}
        )
        text = " ".join([f"Echo: {turn.text}", *notes])
        for word in text.split(" "):
            control.emit("agent_message_delta", {**ids, "delta": word + " "})
        control.emit("agent_message", {**ids, "text": text})
        words, prompt = len(text.split()), len(turn.text.split())
        self._usage(
            control, ids, input_tokens=prompt, output_tokens=words, used=used + words + prompt
        )
