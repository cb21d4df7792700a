"""The backend interface: what the runner needs from an agent backend, and no more.

A backend executes one turn at a time. The runner hands it a `TurnControl`: `emit` to
stream events (buffered and sent in batches by the runner), a queue of steer texts that
arrive during the turn, and an `interrupted` flag set on interrupt or cancel.
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


@dataclass
class TurnControl:
    emit: Callable[[str, dict[str, Any]], None]
    steers: queue.Queue[str] = field(default_factory=queue.Queue)
    interrupted: threading.Event = field(default_factory=threading.Event)

    def next_steer(self, timeout_s: float = 0.0) -> str | None:
        try:
            return self.steers.get(timeout=timeout_s) if timeout_s else self.steers.get_nowait()
        except queue.Empty:
            return None


class Backend(Protocol):
    def run_turn(self, turn: TurnInput, control: TurnControl) -> TurnOutcome: ...

    def close(self) -> None: ...
