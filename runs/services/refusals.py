"""How a runs service refuses a write it must not make, in one place per kind of refusal.

- A write to a terminal run (a new command, a claim) is a 409 `run_terminal` carrying the
  run's status and failure kind, so a client sees why, not only that.
- A runner's final report that arrives after a cancel (of its run or its command) or after
  the run ended otherwise changes nothing; a `late-write-rejected` event keeps what was
  refused, so the run's history says the runner finished but lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentrun.errors import conflict
from runs.models import Run
from runs.services.event_log import append_event_locked
from runs.services.fencing import late_write_payload

if TYPE_CHECKING:
    from runs.services.terminal import TurnResult


def refuse_if_terminal(run: Run) -> None:
    """Errors: 409 `run_terminal` when the run is terminal."""
    if run.is_terminal:
        raise conflict(
            f"run {run.id} is already terminal: {run.status}",
            code="run_terminal",
            failure_kind=run.failure_kind or "conflict",
            status=run.status,
        )


def record_losing_report_locked(
    run: Run, *, source: str, runner_id: str, reason: str, result: TurnResult, **ids: Any
) -> None:
    """Record a runner's report that lost (to a cancel, or to the run's earlier end) as
    `late-write-rejected`: it changes nothing, but the history keeps what was refused.
    The caller decides that it lost; a report that agrees with what happened is not one."""
    append_event_locked(
        run=run,
        type="backend_status",
        payload=late_write_payload(
            run,
            source=source,
            runner_id=runner_id,
            reason=reason,
            **ids,
            refused=result.as_payload(),
        ),
    )
