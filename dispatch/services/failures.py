"""Failed launches: retry with backoff, then terminalise (seed `retryRunnerDispatchIntent`,
`terminalizeRunnerDispatchIntent`).

Both settle a claim under the same fence as completion (`claims.lock_claim_locked`: run →
command → intent, refusing a stale or fenced claim with `StaleClaimError` after commit).
The launch step picks the retry delay with `agentrun.backoff.backoff_ms` (capped
exponential, equal jitter).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentrun.redaction import redact_json
from dispatch.models import IntentState, RunnerDispatchIntent
from dispatch.services.claims import IntentClaim, LockedClaim, lock_claim_locked
from runs.models import Command, CommandState, FailureKind, Run, RunStatus
from runs.phases import Phase
from runs.services.event_log import NewEvent, append_event_locked, append_events_locked
from runs.services.terminal import TurnResult, terminalize_run_locked


def retry_intent(
    *, claim: IntentClaim, error: dict[str, Any], delay_ms: int
) -> RunnerDispatchIntent:
    """Put a failed attempt back as `retry`, due after `delay_ms`.

    Locks: run → command → intent. Side effects: `last_error` (redacted) and a
    `backend_status {phase: runner-dispatch-retry}` event. Errors: `StaleClaimError`.
    """
    with transaction.atomic(durable=True):
        locked = lock_claim_locked(claim)
        if locked.refusal is None:
            _retry_locked(locked, claim, redact_json(error), delay_ms)
    if locked.refusal is not None:
        raise locked.error(claim)
    return locked.intent


def _retry_locked(locked: LockedClaim, claim: IntentClaim, error: Any, delay_ms: int) -> None:
    now = timezone.now()
    next_attempt_at = now + timedelta(milliseconds=delay_ms)
    _settle_intent(locked.intent, state=IntentState.RETRY, due=next_attempt_at, error=error)
    append_event_locked(
        run=locked.run,
        type="backend_status",
        payload={
            **intent_phase(Phase.RUNNER_DISPATCH_RETRY, claim),
            "delay_ms": delay_ms,
            "next_attempt_at": next_attempt_at.isoformat(),
            "error": error,
            "dispatcher": claim.lease_owner,
        },
    )


def intent_phase(phase: str, intent: IntentClaim | RunnerDispatchIntent) -> dict[str, Any]:
    """The opening of a `backend_status` event about a dispatch intent's attempt."""
    return {
        "phase": phase,
        "command_id": intent.command_id,
        "dispatch_intent_id": intent.id,
        "attempt_count": intent.attempt_count,
    }


def _settle_intent(intent: RunnerDispatchIntent, *, state: str, due: Any, error: Any) -> None:
    """Release the lease and record the outcome of a failed attempt. Needs the claim locks."""
    intent.state = state
    intent.lease_owner = intent.lease_expires_at = None
    intent.next_attempt_at = due
    intent.last_error = error
    intent.updated_at = timezone.now()
    intent.save(update_fields=_SETTLE_FIELDS)


_SETTLE_FIELDS = [
    "state",
    "lease_owner",
    "lease_expires_at",
    "next_attempt_at",
    "last_error",
    "updated_at",
]


@dataclass(frozen=True)
class TerminalizedIntent:
    intent: RunnerDispatchIntent
    command: Command
    run: Run


def terminalize_intent(*, claim: IntentClaim, error: dict[str, Any]) -> TerminalizedIntent:
    """Give up on an intent: intent, command and run `failed` (seed
    `terminalizeRunnerDispatchIntent`).

    Locks: run → command → intent. Events, in the seed's order: `backend_status {phase:
    runner-dispatch-failed}`, `backend_status {phase: command-terminal}`, then
    `terminal_status` through `terminalize_run_locked`, which also releases the claim,
    fences the run's other open intents and projects the run onto its session.
    Errors: `StaleClaimError` when the claim is stale or was fenced.
    """
    with transaction.atomic(durable=True):
        locked = lock_claim_locked(claim)
        if locked.refusal is None:
            _terminalize_locked(locked, redact_json(error))
    if locked.refusal is not None:
        raise locked.error(claim)
    return TerminalizedIntent(locked.intent, locked.command, locked.run)


def _terminalize_locked(locked: LockedClaim, failure: Any) -> None:
    now = timezone.now()
    message = str(failure.get("message") or "runner dispatch failed")
    kind = failure.get("failure_kind")
    failure_kind = kind if kind in FailureKind.values else FailureKind.INFRA_FAILED
    intent, command, run = locked.intent, locked.command, locked.run
    _settle_intent(intent, state=IntentState.FAILED, due=now, error=failure)
    command.state = CommandState.FAILED
    command.updated_at = now
    command.save(update_fields=["state", "updated_at"])
    facts = {
        "reason": str(failure.get("reason") or Phase.RUNNER_DISPATCH_FAILED),
        "command_id": command.id,
        "failure_kind": failure_kind,
        "message": message,
    }
    dispatch_failed = {"dispatch_intent_id": intent.id, "attempt_count": intent.attempt_count}
    command_terminal = {
        "state": CommandState.FAILED,
        "terminal_status": RunStatus.FAILED,
        "thread_id": None,
    }
    append_events_locked(
        run=run,
        events=[
            NewEvent(
                "backend_status",
                {
                    "phase": Phase.RUNNER_DISPATCH_FAILED,
                    **facts,
                    **dispatch_failed,
                    "values_printed": False,
                },
            ),
            NewEvent(
                "backend_status",
                {"phase": Phase.COMMAND_TERMINAL, **facts, **command_terminal, "turn_id": None},
            ),
        ],
    )
    terminalize_run_locked(
        run,
        result=TurnResult(RunStatus.FAILED, failure_kind=failure_kind, failure_message=message),
        detail={"reason": facts["reason"]},
    )
