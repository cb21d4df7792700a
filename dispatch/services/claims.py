"""Claiming and completing dispatch intents (seed `claimRunnerDispatchIntents`,
`completeRunnerDispatchIntent`).

A worker claims a batch of due intents in one transaction (`dispatch.locks`): each gets
`state = dispatching`, a lease and `attempt_count + 1`. The triple (id, lease_owner,
attempt_count) is the claim's fencing token. Settling a claim (complete here; retry and
terminalise in `failures`) first locks run → command → intent and checks it:

- live: the intent is still `dispatching` under this owner and attempt, and its run and
  command are not terminal → the settle proceeds;
- fenced: the run or command went terminal meanwhile → the intent is `cancelled` (if a
  terminal path has not done so already), and the worker gets `StaleClaimError`;
- stale: another worker re-claimed the intent after the lease expired, or it was settled
  → nothing changes, and the worker gets `StaleClaimError`.

Errors are raised after the transaction commits, so a fence is kept. Nothing here does I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from agentrun.errors import AgentRunError
from dispatch.launchers.base import Launched
from dispatch.locks import claim_due_intents, lock_intent
from dispatch.models import IntentState, RunnerDispatchIntent
from dispatch.services.intents import fence_open_intents_locked
from runs.locks import lock_command, lock_run
from runs.models import Command, Run
from runs.services.events import append_event_locked
from runs.services.runners import RunnerJobSpec, save_runner_job


@dataclass(frozen=True)
class IntentClaim:
    """A worker's claim of one intent; (id, lease_owner, attempt_count) fences it."""

    id: str
    lease_owner: str
    attempt_count: int
    run_id: str
    command_id: str
    runner_job_id: str
    backend_profile: str
    tenant_id: str
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> IntentClaim:
        return cls(
            id=row["id"],
            lease_owner=row["lease_owner"],
            attempt_count=row["attempt_count"],
            run_id=row["run_id"],
            command_id=row["command_id"],
            runner_job_id=row["runner_job_id"],
            backend_profile=row["backend_profile"],
            tenant_id=row["tenant_id"],
            options=_json_object(row["input"]),
        )

    @property
    def runner_id(self) -> str:
        """The runner id planned for this intent, the same on every attempt."""
        return "runner_" + self.runner_job_id.removeprefix("rjob_")


def _json_object(value: Any) -> dict[str, Any]:
    """Django's psycopg set-up hands raw `jsonb` back as text; fields decode it, raw SQL must."""
    decoded = json.loads(value) if isinstance(value, str) else value
    return decoded if isinstance(decoded, dict) else {}


class StaleClaimError(AgentRunError):
    """409 `stale_claim`: the claim no longer holds its intent; the worker must let go."""

    def __init__(self, claim: IntentClaim, *, reason: str, state: str) -> None:
        super().__init__(
            f"runner dispatch claim of {claim.id} by {claim.lease_owner} "
            f"(attempt {claim.attempt_count}) is stale: {reason}",
            code="stale_claim",
            http_status=409,
            failure_kind="runner-lease-conflict",
            details={
                "dispatch_intent_id": claim.id,
                "lease_owner": claim.lease_owner,
                "attempt_count": claim.attempt_count,
                "state": state,
            },
        )


@dataclass
class LockedClaim:
    run: Run
    command: Command
    intent: RunnerDispatchIntent
    refusal: str | None  # None: the claim is live

    def error(self, claim: IntentClaim) -> StaleClaimError:
        assert self.refusal is not None
        return StaleClaimError(claim, reason=self.refusal, state=self.intent.state)


def claim_intents(*, owner: str, lease_ms: int, limit: int) -> list[IntentClaim]:
    """Claim up to `limit` due intents for `owner` (one transaction; SKIP LOCKED, so many
    workers claim disjoint batches without waiting). Returns them oldest due first."""
    with transaction.atomic():
        rows = claim_due_intents(owner=owner, lease_ms=lease_ms, limit=max(1, min(limit, 500)))
    return [IntentClaim.from_row(row) for row in rows]


def lock_claim_locked(claim: IntentClaim) -> LockedClaim:
    """Lock run, command and intent (in that order) and check the claim. Must be called
    inside the settling service's transaction; fences the intent if its run or command
    went terminal (seed `lockRunnerDispatchClaim`)."""
    run = lock_run(claim.run_id)
    command = lock_command(claim.command_id, run=run)
    intent = lock_intent(claim.id)
    if (intent.state, intent.lease_owner, intent.attempt_count) != (
        IntentState.DISPATCHING,
        claim.lease_owner,
        claim.attempt_count,
    ):
        held = f"{intent.state} (owner {intent.lease_owner}, attempt {intent.attempt_count})"
        return LockedClaim(run, command, intent, refusal=f"the intent is now {held}")
    if run.is_terminal or command.is_terminal:
        what = (
            f"run {run.id} is {run.status}"
            if run.is_terminal
            else (f"command {command.id} is {command.state}")
        )
        fence_open_intents_locked(run=run, command=command, reason=what)
        intent.refresh_from_db(fields=["state", "lease_owner", "lease_expires_at", "last_error"])
        return LockedClaim(run, command, intent, refusal=what)
    return LockedClaim(run, command, intent, refusal=None)


@dataclass(frozen=True)
class Completion:
    claim: IntentClaim
    launched: Launched


@dataclass
class CompletionOutcome:
    completed: list[RunnerDispatchIntent] = field(default_factory=list)
    refused: list[tuple[Completion, StaleClaimError]] = field(default_factory=list)


def complete_intents(*, completions: list[Completion]) -> CompletionOutcome:
    """Record launched jobs and mark their intents `dispatched`, in ONE transaction.

    Locks: per item, run → command → intent, items ordered by (run id, intent id) so
    concurrent batches lock in the same order. For each live claim: saves the runner job
    (`save_runner_job`, idempotent on the intent's planned runner job id), sets the
    outcome, and appends `backend_status {phase: runner-dispatched}`. Refused claims
    (stale or fenced) change nothing but a fence and are returned with their error.
    """
    outcome = CompletionOutcome()
    with transaction.atomic():
        for item in sorted(completions, key=lambda c: (c.claim.run_id, c.claim.id)):
            locked = lock_claim_locked(item.claim)
            if locked.refusal is not None:
                outcome.refused.append((item, locked.error(item.claim)))
            else:
                outcome.completed.append(_complete_locked(locked, item))
    return outcome


def complete_intent(*, claim: IntentClaim, launched: Launched) -> RunnerDispatchIntent:
    """`complete_intents` for one claim. Errors: `StaleClaimError` (409 `stale_claim`)."""
    outcome = complete_intents(completions=[Completion(claim, launched)])
    if outcome.refused:
        raise outcome.refused[0][1]
    return outcome.completed[0]


def _complete_locked(locked: LockedClaim, item: Completion) -> RunnerDispatchIntent:
    """Save the runner job, mark the intent dispatched, record it. Needs the claim locks."""
    claim, launched, intent = item.claim, item.launched, locked.intent
    spec = _runner_job_spec(claim, launched)
    job = save_runner_job(run_id=claim.run_id, spec=spec, idempotency_key=claim.runner_job_id).job
    now = timezone.now()
    intent.state = IntentState.DISPATCHED
    intent.dispatch_outcome = launched.outcome
    intent.actual_runner_job_id = job.id
    intent.active_runner_id = launched.runner_id
    intent.lease_owner = intent.lease_expires_at = intent.last_error = None
    intent.dispatched_at = intent.updated_at = now
    intent.save(update_fields=[*_LEASE_FIELDS, *_OUTCOME_FIELDS])
    append_event_locked(
        run=locked.run,
        type="backend_status",
        payload={
            "phase": "runner-dispatched",
            "command_id": claim.command_id,
            "dispatch_intent_id": claim.id,
            "attempt_count": claim.attempt_count,
            "runner_job_id": job.id,
            "runner_id": launched.runner_id,
            "launcher": launched.launcher,
            "job_name": launched.job_name,
            "namespace": launched.namespace,
            "dispatch_outcome": launched.outcome,
            "dispatcher": claim.lease_owner,
        },
    )
    return intent


def _runner_job_spec(claim: IntentClaim, launched: Launched) -> RunnerJobSpec:
    return RunnerJobSpec(
        command_id=claim.command_id,
        attempt_id=f"{claim.id}:{claim.attempt_count}",
        runner_id=launched.runner_id,
        namespace=launched.namespace,
        job_name=launched.job_name,
        manager_url=launched.manager_url,
        image=launched.image,
        source_commit=launched.source_commit,
        service_account_name=launched.details.get("service_account_name"),
        result={"launcher": launched.launcher, "outcome": launched.outcome, **launched.details},
    )


_OUTCOME_FIELDS = [
    "dispatch_outcome",
    "actual_runner_job_id",
    "active_runner_id",
    "last_error",
    "dispatched_at",
]
_LEASE_FIELDS = ["state", "lease_owner", "lease_expires_at", "updated_at"]


def defer_intents(*, claims: list[IntentClaim], delay_ms: int, why: dict[str, Any]) -> int:
    """Give claims back, due again after `delay_ms`, without counting the attempt (an
    intent over its profile's capacity waits; it does not fail).

    A compare-and-set on the claim triple, no lock (rule 9): a claim that went stale
    meanwhile matches no row and is left to its new owner. Returns how many were deferred.
    """
    now = timezone.now()
    deferred = 0
    with transaction.atomic():
        for claim in claims:
            deferred += RunnerDispatchIntent.objects.filter(
                pk=claim.id,
                state=IntentState.DISPATCHING,
                lease_owner=claim.lease_owner,
                attempt_count=claim.attempt_count,
            ).update(
                state=Case(
                    When(attempt_count__gt=1, then=Value(IntentState.RETRY)),
                    default=Value(IntentState.PENDING),
                ),
                attempt_count=F("attempt_count") - 1,
                lease_owner=None,
                lease_expires_at=None,
                next_attempt_at=now + timedelta(milliseconds=delay_ms),
                last_error={"waiting": True, **why},
                updated_at=now,
            )
    return deferred
