"""Terminalising runs whose runner is gone: the lease reaper and the retention fence.

- `reap_expired_leases`: a claimed or running run whose lease expired (no heartbeat
  extended it) more than a grace period ago is failed as `infra-failed`.
- `terminalize_abandoned_run` (seed `withRunnerRetentionFence` with
  `terminalizeStalePending`): reconciliation saw the run's runner job end or disappear
  while the run is not terminal and no live lease holds it.

Each run is settled in its own short transaction, never a batch of runs in one, so the
reaper holds one run (and then its session) at a time and cannot deadlock with session
admission. The reaper takes the run lock with SKIP LOCKED: a run being written right now
is alive enough to wait for the next pass. Both then go through
`terminalize_run_locked`, which releases the claim, deletes the lease row, fences open
dispatch intents, appends `terminal_status` and projects the run onto its session.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from runs.locks import lock_run, lock_run_commands, lock_run_unless_busy
from runs.models import CommandState, FailureKind, Run, RunStatus
from runs.phases import Phase
from runs.selectors import expired_lease_run_ids
from runs.services.event_log import PendingEvents, collecting
from runs.services.terminal import (
    TurnResult,
    close_open_commands_locked,
    release_claim_locked,
    terminalize_run_locked,
)

if TYPE_CHECKING:
    from sessions.models import Session


@dataclass
class ReapCounts:
    candidates: int = 0
    reaped: int = 0
    skipped: int = 0  # busy, or heartbeated / finished since it was listed

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def reap_expired_leases(*, limit: int, grace_ms: int) -> ReapCounts:
    """Fail up to `limit` runs whose lease expired more than `grace_ms` ago.

    Locks: per run, the run row (SKIP LOCKED) then its commands, one transaction each.
    Side effects per reaped run: `backend_status {phase: lease-expired}`, open commands
    `failed` with `command-terminal` events, run `failed` / `infra-failed` (see module doc).
    Safe on many workers at once: a run is re-checked under its lock.
    """
    cutoff = timezone.now() - timedelta(milliseconds=grace_ms)
    run_ids = expired_lease_run_ids(cutoff=cutoff, limit=limit)
    counts = ReapCounts(candidates=len(run_ids))
    for run_id in run_ids:
        if _reap_one(run_id, cutoff):
            counts.reaped += 1
        else:
            counts.skipped += 1
    return counts


def _reap_one(run_id: str, cutoff: datetime) -> bool:
    with transaction.atomic(durable=True):
        run = lock_run_unless_busy(run_id)
        if run is None or run.is_terminal or run.claimed_by is None:
            return False
        expired_at = run.lease_expires_at
        if expired_at is None or expired_at > cutoff:
            return False  # it heartbeated since it was listed
        reason = (
            f"runner {run.claimed_by} stopped heartbeating: its lease expired at "
            f"{expired_at.isoformat()}"
        )
        facts = {
            "runner_id": run.claimed_by,
            "lease_epoch": run.lease_epoch,
            "lease_expires_at": expired_at.isoformat(),
        }
        fail_run_locked(run, InfraFailure(phase=Phase.LEASE_EXPIRED, reason=reason, facts=facts))
    return True


def terminalize_abandoned_run(*, run_id: str, reason: str, **facts: Any) -> bool:
    """Fail a live run whose runner job is gone (the retention fence). Returns whether it
    did. A terminal run only has a leftover claim released; a run a runner still holds
    with a live lease is left alone (the reaper takes it if the lease lapses).

    Locks: the run row, then its commands. Errors: 404 for an unknown run.
    """
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        if run.is_terminal:
            release_claim_locked(run)
            return False
        if run.claimed_by is not None and not run.lease_expired(timezone.now()):
            return False
        facts = {"retention_fence": True, **facts}
        fail_run_locked(run, InfraFailure(phase=Phase.RUNNER_GONE, reason=reason, facts=facts))
    return True


@dataclass(frozen=True)
class InfraFailure:
    """Why the server fails a live run `infra-failed` (its lease lapsed, its runner job is
    gone, a new turn replaced it, a doctor repair): the phase and message of its
    `backend_status` event and the `facts` that event carries; `code` is the
    machine-readable `reason` of its command and run terminal events (the phase by default).
    """

    phase: Phase
    reason: str
    code: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def fail_run_locked(
    run: Run,
    failure: InfraFailure,
    *,
    session: Session | None = None,
    events: PendingEvents | None = None,
) -> None:
    """Fail a locked, live run as `infra-failed` with its open commands. Needs the run
    lock; takes the command locks. `session`: the run's session row when the caller has
    locked it; `events`: the caller's pending events (else they are appended here)."""
    code, reason = failure.code or str(failure.phase), failure.reason
    commands = lock_run_commands(run)
    kind = FailureKind.INFRA_FAILED
    with collecting(events) as events:
        events.add(
            run,
            "backend_status",
            {"phase": failure.phase, "reason": reason, "failure_kind": kind, **failure.facts},
        )
        close_open_commands_locked(
            run,
            commands,
            state=CommandState.FAILED,
            failure_kind=kind,
            reason=code,
            message=reason,
            events=events,
        )
        terminalize_run_locked(
            run,
            result=TurnResult(RunStatus.FAILED, failure_kind=kind, failure_message=reason),
            session=session,
            events=events,
            detail={"reason": code},
        )
