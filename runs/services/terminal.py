"""Ending runs: terminalise a live run, close its open commands, release a leftover claim,
keep the backend thread a runner reported.

Every path that ends a run goes through `terminalize_run_locked` (a runner's finish, a
cancel, the lease reaper, the retention fence, a dispatch that gave up): it sets the
terminal status, releases the claim and deletes the lease row, fences the run's open
dispatch intents, revokes the run's runner keys, projects the run onto its session and
its queue task, and records `terminal_status`. The run's row, a cancel's request and
closed commands, the intents, the lease and the keys are written in one statement
(`runs.sql.end_run`). Each helper needs the caller's transaction and run lock; each takes
the caller's `PendingEvents` when the caller collects its events, and appends its own
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from agentrun.errors import AgentRunError
from agentrun.raw_sql import RowWrite
from agentrun.redaction import redact_text
from queues import projection as queue_projection
from runs.models import RUN_OUTCOME_FIELDS, Command, CommandState, Lease, Run, RunStatus
from runs.phases import Phase
from runs.services.approvals import resolve_pending_approvals_locked
from runs.services.event_log import PendingEvents, collecting, fence_runner_write
from runs.sql import end_run
from sessions import projection

if TYPE_CHECKING:
    from sessions.models import Session


@dataclass(frozen=True)
class TurnResult:
    """A runner's terminal report for a command or a run."""

    terminal_status: str
    failure_kind: str | None = None
    failure_message: str | None = None
    thread_id: str | None = None
    turn_id: str | None = None

    def as_payload(self) -> dict[str, Any]:
        return {
            "terminal_status": self.terminal_status,
            "failure_kind": self.failure_kind,
            "message": self.failure_message,
            "thread_id": self.thread_id,
            "turn_id": self.turn_id,
        }


def fence_finish_report(
    run: Run, runner_id: str, lease_epoch: int, result: TurnResult, *, source: str, **ids: Any
) -> AgentRunError | None:
    """Check a runner's terminal report (of its run or of a command) against the live claim:
    None when it may proceed, else the 409 to raise after the commit, the refusal recorded
    with the result it carried. Needs the run lock."""
    return fence_runner_write(
        run,
        runner_id=runner_id,
        lease_epoch=lease_epoch,
        source=source,
        **ids,
        refused=result.as_payload(),
    )


def close_open_commands_locked(
    run: Run,
    commands: list[Command],
    *,
    state: str,
    failure_kind: str,
    reason: str,
    message: str,
    events: PendingEvents | None = None,
) -> None:
    """Close every still-open command of a run that is ending (`cancelled` when the runner
    finished the run before reaching it, `failed` when the run is failed for it), each with
    its `command-terminal` event, so no command stays pending under a terminal run. Needs
    the run lock and the command locks; `events`: the caller's pending events, if it
    collects them."""
    now = timezone.now()
    terminal_status = RunStatus.CANCELLED if state == CommandState.CANCELLED else RunStatus.FAILED
    with collecting(events) as events:
        for command in commands:
            if not command.is_terminal:
                command.state = state
                command.updated_at = now
                command.save(update_fields=["state", "updated_at"])
                events.add(
                    run,
                    "backend_status",
                    {
                        "phase": Phase.COMMAND_TERMINAL,
                        "reason": reason,
                        "command_id": command.id,
                        "state": state,
                        "terminal_status": terminal_status,
                        "failure_kind": failure_kind,
                        "message": message,
                        "thread_id": None,
                        "turn_id": None,
                    },
                )


def terminalize_run_locked(
    run: Run,
    *,
    result: TurnResult,
    session: Session | None = None,
    events: PendingEvents | None = None,
    detail: dict[str, Any] | None = None,
    ending: EndingWrites | None = None,
) -> None:
    """Move a locked, live run to its terminal status, release its claim, record it.
    `session`: the run's session row when the caller has locked it; `events`: the caller's
    pending events, if it collects them (else `terminal_status` is appended here);
    `detail`: what the seed's `terminal_status` payload says about why (a cancel's
    `cancel_request_id` and `cancel_epoch`, a failure's `reason`); `ending`: what the
    caller changed on the run and its commands, written in the same statement."""
    ending = ending or EndingWrites()
    with collecting(events) as events:
        fields = _set_terminal_status(run, result=result)
        # The run's columns, its commands', its intents, lease and keys: one statement.
        queue = end_run(
            run=run,
            writes=[RowWrite(run, (*fields, *ending.run_fields)), *ending.commands],
            intent_reasons=ending.intent_reasons,
            reason=f"run terminalized as {run.status}",
        )
        resolve_pending_approvals_locked(
            run, state="cancelled", reason=f"the run ended: {run.status}", events=events
        )
        projection.project_run_terminal_locked(run, session=session)
        events.add(
            run,
            "terminal_status",
            {**result.as_payload(), **(detail or {})},
        )
    # run → task lock order: the task comes last
    queue_projection.on_run_terminal_locked(run, read=(queue.attempt_task_id, queue.queued_turns))


@dataclass
class EndingWrites:
    """What a caller that ends a run changed besides its terminal status, for the same
    statement: more of the run's columns (a cancel's mark), its closed commands' rows, and
    the reason each closed command's open intents are fenced with."""

    run_fields: tuple[str, ...] = ()
    commands: list[RowWrite] = field(default_factory=list)
    intent_reasons: dict[str, str] = field(default_factory=dict)


def _set_terminal_status(run: Run, *, result: TurnResult) -> tuple[str, ...]:
    """Set the terminal status and release the claim on the instance; the changed fields."""
    now = timezone.now()
    run.status = result.terminal_status
    run.terminal_status = result.terminal_status
    run.failure_kind = result.failure_kind
    # A runner's or backend's error text may quote a credential: stored redacted, as the
    # terminal_status event's copy is.
    message = result.failure_message
    run.failure_message = redact_text(message) if message else message
    run.updated_at = now
    run.claimed_by = None
    run.lease_expires_at = None
    return ("status", *RUN_OUTCOME_FIELDS, "claimed_by", "lease_expires_at", "updated_at")


def release_claim_locked(run: Run) -> None:
    """Drop a terminal run's leftover claim and lease row. Needs the run lock."""
    if run.claimed_by is not None or run.lease_expires_at is not None:
        run.claimed_by = None
        run.lease_expires_at = None
        run.updated_at = timezone.now()
        run.save(update_fields=["claimed_by", "lease_expires_at", "updated_at"])
    Lease.objects.filter(run=run).delete()


def record_thread_locked(
    run: Run, *, result: TurnResult, events: PendingEvents | None = None
) -> None:
    """Keep the backend thread a runner reported on the run's session, so the next run
    resumes it; records `backend_status {phase: session-updated}` (in the caller's pending
    `events`, if it collects them). Needs the run lock."""
    if not result.thread_id or run.session_id is None:
        return
    run.session_ref = projection.record_thread_locked(
        run, thread_id=result.thread_id, turn_id=result.turn_id
    )
    run.updated_at = timezone.now()
    run.save(update_fields=["session_ref", "updated_at"])
    with collecting(events) as events:
        events.add(
            run,
            "backend_status",
            {
                "phase": Phase.SESSION_UPDATED,
                "session_id": run.session_id,
                "thread_id": result.thread_id,
                "turn_id": result.turn_id,
            },
        )
