"""The plain types of turn admission: what a caller asks for and what admission decided.

They live apart from `sessions.services.admission` so the work queue can build and return
them (a queued turn is a `TurnRequest` filed as a task; `when_busy=enqueue` answers with an
`Admission`) without importing the admission service, which the queue scheduler calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runs.control_models import CancelRequest
    from runs.models import Command, Run
    from runs.services.lifecycle import RunSpec

WHEN_BUSY = ("reject", "steer", "interrupt", "enqueue")


@dataclass(frozen=True)
class TurnRequest:
    session_id: str
    tenant_id: str
    spec: RunSpec
    payload: dict[str, Any]
    run_id: str | None = None
    idempotency_key: str | None = None
    dispatch: dict[str, Any] | None = None
    when_busy: str = "reject"
    expected_turn_id: str | None = None
    requested_by: str | None = None


@dataclass(frozen=True)
class Admission:
    disposition: str
    run: Run | None  # None when the turn was queued
    command: Command | None
    cancel_request: CancelRequest | None = None
    task_id: str | None = None  # the work-queue task of a queued turn
    position: int | None = None  # its place among the session's queued turns (1 = next)

    @property
    def created(self) -> bool:
        return self.disposition in ("created", "interrupted_and_created")
