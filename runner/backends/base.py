"""The backend interface: what the runner needs from an agent backend, and no more.

A backend executes one turn at a time. The runner hands it a `TurnControl`: `emit` to
stream events (buffered and sent in batches by the runner), a queue of steer texts that
arrive during the turn, an `interrupted` flag set on interrupt or cancel, `ask` — a person's
answer to an approval request under `approval_policy: ask` (blocking; the runner records it
through the API and waits) — and `note_usage`, which a backend calls with the tokens its
turn has used so far so the runner can stop it at the run's budget (`over_budget`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class TurnInput:
    command_id: str
    text: str
    payload: dict[str, Any]
    thread_id: str | None


@dataclass(frozen=True)
class TurnOutcome:
    terminal_status: str  # completed | failed | cancelled
    failure_kind: str | None = None
    failure_message: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None


# What a backend tells `ask`: the approval's kind (command | file_change | other), a
# one-line summary a person reads, and the details the backend gave. Answers "approve" or
# "deny"; with nobody to ask (no runner wired it), "deny".
Ask = Callable[[str, str, dict[str, Any]], str]


def _nobody(kind: str, summary: str, details: dict[str, Any]) -> str:
    return "deny"


@dataclass
class TurnControl:
    emit: Callable[[str, dict[str, Any]], None]
    steers: queue.Queue[str] = field(default_factory=queue.Queue)
    interrupted: threading.Event = field(default_factory=threading.Event)
    ask: Ask = _nobody
    # Tokens this turn may use before the run's budget is crossed (None: no budget).
    usage_limit: int | None = None
    over_budget: threading.Event = field(default_factory=threading.Event)
    on_budget: Callable[[int], None] | None = None  # the runner records `budget_reached`

    def note_usage(self, turn_tokens: int) -> None:
        """The turn has used `turn_tokens` so far; past the limit, stop it."""
        if self.usage_limit is not None and turn_tokens > self.usage_limit:
            self.stop_for_budget(turn_tokens)

    def stop_for_budget(self, turn_tokens: int) -> None:
        """Interrupt the turn because the budget is spent (once recorded)."""
        if not self.over_budget.is_set():
            self.over_budget.set()
            if self.on_budget is not None:
                self.on_budget(turn_tokens)
        self.interrupted.set()

    def next_steer(self, timeout_s: float = 0.0) -> str | None:
        try:
            return self.steers.get(timeout=timeout_s) if timeout_s else self.steers.get_nowait()
        except queue.Empty:
            return None


class Backend(Protocol):
    def run_turn(self, turn: TurnInput, control: TurnControl) -> TurnOutcome: ...

    def close(self) -> None: ...


def approval_decision(
    policy: dict[str, Any], control: TurnControl, kind: str, summary: str, details: dict[str, Any]
) -> str:
    """ "approve" or "deny" under the run's `approval_policy`: `ask` asks a person (through
    `control.ask`), `deny` refuses all, anything else (`auto`, codex's own policies)
    answers from the policy's `approvals` (`accept` approves; the default declines)."""
    mode = policy.get("approval_policy")
    if mode == "ask":
        return control.ask(kind, summary, details)
    if mode == "deny":
        return "deny"
    return "approve" if policy.get("approvals", "decline") == "accept" else "deny"
