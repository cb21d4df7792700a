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
from functools import cached_property, lru_cache
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from agentrun.auth import mint_keys, runner_key_expires_at
from agentrun.errors import AgentRunError, not_found
from agentrun.hashing import stable_hash
from agentrun.models import ApiKeyRole
from agentrun.redaction import redact_json
from dispatch.intents import fence_open_intents_locked
from dispatch.launchers.base import Launched
from dispatch.locks import (
    claim_due_intents,
    claim_due_intents_with_keys,
    lock_intent,
)
from dispatch.models import IntentState, RunnerDispatchIntent
from dispatch.selectors import capacity_limit
from dispatch.sql import DispatchedJob, Settled, record_dispatched_statement
from runs.locks import lock_command, lock_run, lock_runs_and_commands
from runs.models import Command, Run
from runs.phases import Phase
from runs.services.event_log import (
    NewEvent,
    RunEvents,
    append_events_to_runs_locked,
    commit_appends,
)


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
    # The profile's `max_concurrent_runs` when the intent was claimed (None: no limit).
    capacity_limit: int | None = None
    session_id: str | None = None  # the run's session, for its Codex home

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
            capacity_limit=_capacity_limit(row.get("capacity")),
            session_id=row.get("session_id"),
        )

    @property
    def runner_id(self) -> str:
        """The runner id planned for this intent, the same on every attempt."""
        return "runner_" + self.runner_job_id.removeprefix("rjob_")


def _json_object(value: Any) -> dict[str, Any]:
    """Django's psycopg set-up hands raw `jsonb` back as text; fields decode it, raw SQL must."""
    decoded = json.loads(value) if isinstance(value, str) else value
    return decoded if isinstance(decoded, dict) else {}


def _capacity_limit(capacity: Any) -> int | None:
    """`capacity_limit` of a claimed row's profile `capacity` (the jsonb's text, as raw SQL
    returns it): every claim of a batch names the same few profiles, so the text's limit
    is decoded once (a pure function of the text; bounded by the profiles there are)."""
    if isinstance(capacity, str):
        return _capacity_limit_of_text(capacity)
    return capacity_limit(_json_object(capacity))


@lru_cache(maxsize=256)
def _capacity_limit_of_text(text: str) -> int | None:
    return capacity_limit(_json_object(text))


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
    with transaction.atomic(durable=True):
        rows = claim_due_intents(owner=owner, lease_ms=lease_ms, limit=max(1, min(limit, 500)))
    return [IntentClaim.from_row(row) for row in rows]


@dataclass(frozen=True)
class RunnerKey:
    """A claim's runner key as its launch needs it: the key row's id (to revoke it) and the
    secret (never stored)."""

    id: str
    secret: str


def claim_intents_with_keys(
    *, owner: str, lease_ms: int, limit: int
) -> list[tuple[IntentClaim, RunnerKey]]:
    """`claim_intents`, plus each claim's run-scoped runner key, written by the claim's
    own statement (`dispatch.locks.claim_due_intents_with_keys`). Why together: a launch
    needs both committed, and on the pickup path each round trip and each commit before the
    first launch counts (bench cell 4); a key whose launch does not happen is revoked by
    the dispatcher, as one whose launch fails always was. Must be called outside a
    transaction: the statement commits on its own, before any launch."""
    minted = mint_keys(ApiKeyRole.RUNNER, max(1, min(limit, 500)))
    rows = claim_due_intents_with_keys(
        owner=owner, lease_ms=lease_ms, keys=minted, expires_at=runner_key_expires_at()
    )
    secret_of = {key.id: key.secret for key in minted}
    return [
        (IntentClaim.from_row(row), RunnerKey(row["key_id"], secret_of[row["key_id"]]))
        for row in rows
    ]


def lock_claim_locked(claim: IntentClaim) -> LockedClaim:
    """Lock run, command and intent (in that order) and check the claim. Must be called
    inside the settling service's transaction; fences the intent if its run or command
    went terminal (seed `lockRunnerDispatchClaim`)."""
    run = lock_run(claim.run_id)
    command = lock_command(claim.command_id, run=run)
    return _checked_locked(claim, run, command, lock_intent(claim.id))


def _checked_locked(
    claim: IntentClaim, run: Run, command: Command, intent: RunnerDispatchIntent
) -> LockedClaim:
    if (refusal := _held_elsewhere(claim, intent)) is not None:
        return LockedClaim(run, command, intent, refusal=refusal)
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


def _held_elsewhere(claim: IntentClaim, intent: RunnerDispatchIntent) -> str | None:
    """Why the intent is no longer this claim's (re-claimed or settled); None if it is."""
    if (intent.state, intent.lease_owner, intent.attempt_count) == (
        IntentState.DISPATCHING,
        claim.lease_owner,
        claim.attempt_count,
    ):
        return None
    held = f"{intent.state} (owner {intent.lease_owner}, attempt {intent.attempt_count})"
    return f"the intent is now {held}"


@dataclass(frozen=True)
class Completion:
    claim: IntentClaim
    launched: Launched


@dataclass
class CompletionOutcome:
    settled: Settled | None = None  # the intents written (dispatched)
    refused: list[tuple[Completion, StaleClaimError]] = field(default_factory=list)

    @property
    def dispatched(self) -> int:
        return len(self.settled.rows) if self.settled else 0

    @cached_property
    def completed(self) -> list[RunnerDispatchIntent]:
        """The dispatched intents, as written (read into models on first access)."""
        return self.settled.intents() if self.settled else []


def complete_intents(*, completions: list[Completion]) -> CompletionOutcome:
    """Record launched jobs and mark their intents `dispatched`, in ONE transaction.

    Locks every run, then every command, each in id order (so concurrent batches queue and
    never deadlock), and in the same round trip saves the runner jobs (idempotent on each
    intent's planned runner job id) and sets the outcome of each intent that is still the
    claim's (the write's compare-and-set, which is the intents' lock) and whose run and
    command have not ended (`dispatch.sql`, `runs.locks.lock_runs_and_commands`, whose
    string also carries the transaction's BEGIN: three round trips a settle); then
    appends `backend_status {phase: runner-dispatched}` to each written intent's run — all
    of the batch in set-based statements, so a batch costs the same statements whatever
    its size. Refused claims (fenced: run or command ended; stale: re-claimed or settled)
    change nothing but a fence and are returned with their error; only they read their
    intent (locked, to say why).
    """
    ordered = sorted(completions, key=lambda c: (c.claim.run_id, c.claim.id))
    jobs = [_dispatched_job(item.claim, item.launched) for item in ordered]
    outcome = CompletionOutcome()
    with transaction.atomic(durable=True):
        now = timezone.now()
        locked = lock_runs_and_commands(
            [item.claim.run_id for item in ordered],
            [item.claim.command_id for item in ordered],
            then=[record_dispatched_statement(jobs, now=now)],
        )
        outcome.settled = Settled(locked.then[0], now)
        written = outcome.settled.ids
        events: dict[str, RunEvents] = {}
        for item, job in zip(ordered, jobs, strict=True):
            run, state = locked.runs[item.claim.run_id], locked.commands[item.claim.command_id]
            if state.run_id != run.id:
                raise not_found("command", item.claim.command_id)
            if item.claim.id in written:
                entry = events.setdefault(run.id, RunEvents(run, []))
                entry.events.append(NewEvent("backend_status", _dispatched_payload(item, job.id)))
            elif run.is_terminal or state.is_terminal:  # fenced, as a single settle does
                command = lock_command(item.claim.command_id, run=run)  # held: read whole
                fenced = _checked_locked(item.claim, run, command, lock_intent(item.claim.id))
                outcome.refused.append((item, fenced.error(item.claim)))
            else:  # re-claimed or settled meanwhile: stale
                intent = lock_intent(item.claim.id)
                refusal = _held_elsewhere(item.claim, intent) or "the intent was not written"
                error = StaleClaimError(item.claim, reason=refusal, state=intent.state)
                outcome.refused.append((item, error))
        append_events_to_runs_locked(batches=list(events.values()), prepare=True)
        commit_appends()  # the last statement: the COMMIT and the NOTIFY in one round trip
    return outcome


def complete_intent(*, claim: IntentClaim, launched: Launched) -> RunnerDispatchIntent:
    """`complete_intents` for one claim. Errors: `StaleClaimError` (409 `stale_claim`)."""
    outcome = complete_intents(completions=[Completion(claim, launched)])
    if outcome.refused:
        raise outcome.refused[0][1]
    return outcome.completed[0]


def _dispatched_payload(item: Completion, runner_job_id: str) -> dict[str, Any]:
    claim, launched = item.claim, item.launched
    return {
        "phase": Phase.RUNNER_DISPATCHED,
        "command_id": claim.command_id,
        "dispatch_intent_id": claim.id,
        "attempt_count": claim.attempt_count,
        "runner_job_id": runner_job_id,
        "runner_id": launched.runner_id,
        "launcher": launched.launcher,
        "job_name": launched.job_name,
        "namespace": launched.namespace,
        "dispatch_outcome": launched.outcome,
        "dispatcher": claim.lease_owner,
    }


def _dispatched_job(claim: IntentClaim, launched: Launched) -> DispatchedJob:
    """The runner job row of a launched claim, under the claim's planned id. Its columns are
    a `RunnerJobSpec`'s fields but the result, and its hash is the spec's `payload_hash()`
    (`stable_hash` of those fields), spelled as one dict: the spec's frozen dataclass and
    the copies of it were half of this per item (issue 18, bench cell 3; a test pins the
    two equal)."""
    columns = {
        "command_id": claim.command_id,
        "attempt_id": f"{claim.id}:{claim.attempt_count}",
        "runner_id": launched.runner_id,
        "namespace": launched.namespace,
        "job_name": launched.job_name,
        "manager_url": launched.manager_url,
        "image": launched.image,
        "source_commit": launched.source_commit,
        "service_account_name": launched.details.get("service_account_name"),
    }
    result = {"launcher": launched.launcher, "outcome": launched.outcome, **launched.details}
    return DispatchedJob(
        intent_id=claim.id,
        lease_owner=claim.lease_owner,
        attempt_count=claim.attempt_count,
        id=claim.runner_job_id,
        run_id=claim.run_id,
        payload_hash=stable_hash(columns),
        result=redact_json(result),
        outcome=launched.outcome,
        columns=columns,
    )


def defer_intents(*, claims: list[IntentClaim], delay_ms: int, why: dict[str, Any]) -> int:
    """Give claims back, due again after `delay_ms`, without counting the attempt (an
    intent over its profile's capacity waits; it does not fail).

    A compare-and-set on the claim triple, no lock (rule 9): a claim that went stale
    meanwhile matches no row and is left to its new owner. Returns how many were deferred.
    """
    now = timezone.now()
    deferred = 0
    with transaction.atomic(durable=True):
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
