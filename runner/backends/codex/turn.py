"""`Turn`: one codex turn, from `turn/start` to `turn/completed`.

`turn/start`; notifications are mapped to agentrun events until `turn/completed`, which
also closes every item still open (interrupted and steered streams never complete theirs).
Steers become `turn/steer` (with `expectedTurnId`), an interrupt becomes `turn/interrupt`,
and the server's approval requests are answered by the run's execution policy
(`approvals.py`). The protocol as observed on codex-cli 0.169.0:
../shared/codex-app-server.md (issue 7).

Events (each payload also carries `thread_id`, `turn_id`, `command_id`; item payloads are
built in `events.py`):
  `item/agentMessage/delta` → agent_message_delta {delta, item_id};
  agentMessage completed → agent_message {text, item_id};
  tool items → tool_call / tool_output; fileChange completed → file_change;
  reasoning deltas / completed → reasoning {item_id, delta | text};
  the turn's token usage (from `thread/tokenUsage/updated`, one event when it ends) →
  token_usage {input_tokens, output_tokens, total_tokens, cached_input_tokens,
  reasoning_output_tokens, thread_total_tokens};
  `error` → error {message, codex_error_info} (`backend_status {phase: retrying}` when
  codex will retry); `warning` / `configWarning` → log {level, message};
  steer, approval and abandoned-item milestones → backend_status {phase, ...}
  (steer-accepted | steer-rejected, approval-requested | approval-answered {method,
  decision}, server-request | server-request-answered for other server requests,
  items-abandoned).
Outcome: turn status completed → completed; failed → failed `backend-failed` with the
error message; interrupted → cancelled (or failed `timeout` past `turn_timeout_s`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from runner.backends.base import TurnControl, TurnInput, TurnOutcome, approval_decision
from runner.backends.codex.approvals import approval_answer, approval_ask, unsupported_error
from runner.backends.codex.config import turn_params
from runner.backends.codex.events import clip, file_changes, text_input, tool_call, tool_output
from runner.backends.codex.rpc import CodexProcess, RpcError, RpcTimeout
from runner.phases import RunnerPhase

log = logging.getLogger("agentrun.runner.codex")

RPC_TIMEOUT_S = 30.0
INTERRUPT_GRACE_S = 5.0
POLL_S = 0.05


class Turn:
    """One turn: start it, pump notifications into events, steer, interrupt, finish."""

    def __init__(
        self,
        process: CodexProcess,
        ids: dict[str, Any],
        turn: TurnInput,
        control: TurnControl,
        *,
        policy: dict[str, Any],
        on_stuck: Callable[[], None],
    ) -> None:
        self.process, self.control = process, control
        self.policy = policy
        self.on_stuck = on_stuck  # ends a process whose interrupted turn does not end
        self.outer_ids = ids  # shared with run_turn, which reports them on failure
        self.thread_id: str = ids["thread_id"]
        self.turn_id: str | None = None
        self.turn = turn
        self.ids: dict[str, Any] = {"thread_id": self.thread_id, "command_id": turn.command_id}
        self.open_items: dict[str, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.usage_base: dict[str, Any] | None = None
        self.last_error: str | None = None
        self.interrupt_at: float | None = None
        self.timed_out = False

    def run(self) -> TurnOutcome:
        result = self.process.request(
            "turn/start",
            {
                "threadId": self.thread_id,
                "input": [text_input(self.turn.text)],
                **turn_params(self.policy),
            },
            timeout_s=RPC_TIMEOUT_S,
        )
        self.turn_id = str(result["turn"]["id"])
        self.ids["turn_id"] = self.outer_ids["turn_id"] = self.turn_id
        timeout_s = float(self.policy.get("turn_timeout_s") or 3600)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._control(deadline):
                # codex did not end the interrupted turn: stop it; the next turn resumes.
                self.on_stuck()
                return self._completed({"status": "interrupted"})
            message = self.process.next_message(POLL_S)
            if message is None:
                continue
            if "id" in message:
                self._answer(message)
                continue
            outcome = self._on_notification(message)
            if outcome is not None:
                return outcome

    # ---- steer, interrupt, timeout ---------------------------------------------------

    def _control(self, deadline: float) -> bool:
        """Forward steers and interrupts; True once an interrupted turn overstays."""
        now = time.monotonic()
        if self.interrupt_at is not None:
            return now - self.interrupt_at > INTERRUPT_GRACE_S
        if now > deadline:
            self.timed_out = True
        if self.control.interrupted.is_set() or self.timed_out:
            self.interrupt_at = now
            try:
                self._request(
                    "turn/interrupt",
                    {"threadId": self.thread_id, "turnId": self.turn_id},
                    timeout_s=INTERRUPT_GRACE_S,
                )
            except RpcTimeout:
                return True
            return False
        while (text := self.control.next_steer()) is not None:
            params: dict[str, Any] = {
                "threadId": self.thread_id,
                "expectedTurnId": self.turn_id,
                "input": [text_input(text)],
            }
            error = self._request("turn/steer", params)
            phase = RunnerPhase.STEER_REJECTED if error else RunnerPhase.STEER_ACCEPTED
            self._emit("backend_status", phase=phase, text=text, message=error)
        return False

    def _request(
        self, method: str, params: dict[str, Any], timeout_s: float = RPC_TIMEOUT_S
    ) -> str | None:
        """A request whose refusal is not fatal (the turn may just have ended)."""
        try:
            self.process.request(method, params, timeout_s=timeout_s)
        except RpcError as error:
            log.info("%s refused: %s", method, error)
            return error.message
        return None

    # ---- the server's requests -------------------------------------------------------

    def _answer(self, message: dict[str, Any]) -> None:
        method, params = str(message.get("method")), message.get("params") or {}
        approval = "pproval" in method
        self._emit(
            "backend_status",
            phase=RunnerPhase.APPROVAL_REQUESTED if approval else RunnerPhase.SERVER_REQUEST,
            method=method,
            request_id=message["id"],
            item_id=params.get("itemId"),
            command=params.get("command"),
            reason=params.get("reason"),
        )
        decision = "decline"
        ask = approval_ask(method, params, self.open_items.get(str(params.get("itemId"))))
        if ask is not None:  # under `ask` this waits for a person; see approvals.py
            kind, summary, details = ask
            verdict = approval_decision(self.policy, self.control, kind, summary, details)
            decision = "accept" if verdict == "approve" else "decline"
        result, answered = approval_answer(method, params, decision)
        if result is None:
            self.process.respond(message["id"], error=unsupported_error(method))
        else:
            self.process.respond(message["id"], result)
        self._emit(
            "backend_status",
            phase=(
                RunnerPhase.APPROVAL_ANSWERED if approval else RunnerPhase.SERVER_REQUEST_ANSWERED
            ),
            method=method,
            request_id=message["id"],
            decision=answered,
        )

    # ---- notifications ---------------------------------------------------------------

    def _on_notification(self, message: dict[str, Any]) -> TurnOutcome | None:
        method, params = message.get("method"), message.get("params") or {}
        turn_id = params.get("turnId") or (params.get("turn") or {}).get("id")
        if turn_id is not None and turn_id != self.turn_id:
            return None  # e.g. the usage of an earlier turn, replayed on resume
        if params.get("threadId", self.thread_id) != self.thread_id:
            return None  # a sub-agent's thread
        if method == "turn/completed":
            return self._completed(params.get("turn") or {})
        handler = _HANDLERS.get(str(method))
        if handler is not None:
            handler(self, params)
        return None

    def _item_started(self, params: dict[str, Any]) -> None:
        item = params.get("item") or {}
        self.open_items[str(item.get("id"))] = item
        call = tool_call(item)
        if call is not None:
            self._emit("tool_call", **call)

    def _item_completed(self, params: dict[str, Any]) -> None:
        item = params.get("item") or {}
        self.open_items.pop(str(item.get("id")), None)
        kind = item.get("type")
        if kind == "agentMessage":
            self._emit("agent_message", item_id=item.get("id"), text=clip(item.get("text")))
        elif kind == "reasoning":
            text = "\n".join([*item.get("summary", []), *item.get("content", [])])
            self._emit("reasoning", item_id=item.get("id"), text=clip(text))
        elif kind == "fileChange":
            changes = file_changes(item)
            self._emit(
                "file_change", item_id=item.get("id"), status=item.get("status"), changes=changes
            )
        else:
            output = tool_output(item)
            if output is not None:
                self._emit("tool_output", **output)

    def _delta(self, params: dict[str, Any]) -> None:
        self._emit("agent_message_delta", item_id=params.get("itemId"), delta=params.get("delta"))

    def _reasoning_delta(self, params: dict[str, Any]) -> None:
        self._emit("reasoning", item_id=params.get("itemId"), delta=params.get("delta"))

    def _token_usage(self, params: dict[str, Any]) -> None:
        usage = params.get("tokenUsage") or {}
        total, last = usage.get("total") or {}, usage.get("last") or {}
        if self.usage_base is None:  # the thread's total before this turn's first call
            self.usage_base = {k: total.get(k, 0) - last.get(k, 0) for k in total}
        self.usage = total
        used = total.get("totalTokens", 0) - (self.usage_base or {}).get("totalTokens", 0)
        self.control.note_usage(int(used))  # past the run's budget: the turn is interrupted

    def _error(self, params: dict[str, Any]) -> None:
        error = params.get("error") or {}
        message = str(error.get("message") or "codex reported an error")
        if params.get("willRetry"):
            self._emit("backend_status", phase=RunnerPhase.RETRYING, message=message)
            return
        self.last_error = message
        self._emit("error", message=message, codex_error_info=error.get("codexErrorInfo"))

    def _warning(self, params: dict[str, Any]) -> None:
        message = params.get("message") or params.get("summary")
        self._emit("log", level="warning", message=clip(message))

    def _completed(self, turn: dict[str, Any]) -> TurnOutcome:
        self._close_open_items()
        self._emit_usage()
        status = turn.get("status")
        ids = (self.thread_id, self.turn_id)
        if status == "completed":
            return TurnOutcome("completed", None, None, *ids)
        if status == "interrupted" and self.timed_out:
            return TurnOutcome("failed", "timeout", "the turn exceeded turn_timeout_s", *ids)
        if status == "interrupted":
            return TurnOutcome("cancelled", "cancelled", "interrupted", *ids)
        message = (turn.get("error") or {}).get("message") or self.last_error
        return TurnOutcome("failed", "backend-failed", message or f"turn {status}", *ids)

    def _close_open_items(self) -> None:
        """Interrupted and steered streams never complete their items: the turn's end
        closes them. A tool call still open gets its tool_output (status incomplete)."""
        abandoned = []
        for item_id, item in self.open_items.items():
            if item.get("type") == "userMessage":
                continue
            abandoned.append({"item_id": item_id, "type": item.get("type")})
            if tool_call(item) is not None:
                self._emit(
                    "tool_output", call_id=item_id, output="", exit_code=None, status="incomplete"
                )
        self.open_items.clear()
        if abandoned:
            self._emit("backend_status", phase=RunnerPhase.ITEMS_ABANDONED, items=abandoned)

    def _emit_usage(self) -> None:
        if self.usage is None:
            return
        base = self.usage_base or {}
        turn = {key: value - base.get(key, 0) for key, value in self.usage.items()}
        self._emit(
            "token_usage",
            model=self.outer_ids.get("model") or self.policy.get("model"),
            input_tokens=turn.get("inputTokens", 0),
            output_tokens=turn.get("outputTokens", 0),
            total_tokens=turn.get("totalTokens", 0),
            cached_input_tokens=turn.get("cachedInputTokens", 0),
            reasoning_output_tokens=turn.get("reasoningOutputTokens", 0),
            thread_total_tokens=self.usage.get("totalTokens", 0),
        )

    def _emit(self, type: str, **payload: Any) -> None:
        self.control.emit(type, {**self.ids, **payload})


_HANDLERS = {
    "item/started": Turn._item_started,
    "item/completed": Turn._item_completed,
    "item/agentMessage/delta": Turn._delta,
    "item/reasoning/summaryTextDelta": Turn._reasoning_delta,
    "item/reasoning/textDelta": Turn._reasoning_delta,
    "thread/tokenUsage/updated": Turn._token_usage,
    "error": Turn._error,
    "warning": Turn._warning,
    "configWarning": Turn._warning,
}
