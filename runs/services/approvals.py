"""Approvals: a backend's request that a person decides (SPEC §9.3).

A runner under `approval_policy: ask` records what its backend asked (`request_approval`):
one record per (run, `request_key`), so a runner that asks the same thing again — the next
runner of the run, after the first died — gets the record it already has, decided or still
pending, never a second one. A person answers it (`answer_approval`): the first answer
wins, the same one again is a replay, another one a 409 `approval_decided`. Unanswered past
`expires_at`, it resolves `expired` (`expire_due_approvals`, a beat task); when its command
or run ends, `cancelled`. Every resolution appends `approval_resolved`.

Locks: the run row, then the command or the approval rows. The run's
`pending_approvals` counter is kept under the run lock, so terminal paths that find it at
zero read nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentrun.errors import AgentRunError, conflict
from agentrun.ids import new_id
from runs.control_models import DECISION_STATES, Approval, ApprovalState
from runs.locks import lock_approval, lock_command, lock_pending_approvals, lock_run
from runs.models import Run
from runs.services.event_log import PendingEvents, collecting, fence_runner_write
from runs.services.refusals import refuse_if_terminal


@dataclass(frozen=True)
class ApprovalRequest:
    """What a backend asked, as the runner reports it."""

    command_id: str
    request_key: str
    kind: str
    summary: str
    details: dict[str, Any]
    ttl_s: int


@dataclass(frozen=True)
class ApprovalResult:
    approval: Approval
    changed: bool  # created (a request) or decided (an answer) by this call


def approval_payload(approval: Approval) -> dict[str, Any]:
    """An approval as its `approval_requested` / `approval_resolved` events carry it."""
    return {
        "approval_id": approval.id,
        "command_id": approval.command_id,
        "kind": approval.kind,
        "summary": approval.summary,
        "details": approval.details,
        "state": approval.state,
        "decided_by": approval.decided_by,
        "reason": approval.reason,
        "expires_at": approval.expires_at.isoformat(),
    }


def request_approval(
    *, run_id: str, runner_id: str, lease_epoch: int, request: ApprovalRequest
) -> ApprovalResult:
    """Record a backend's approval request, or return the record of the same request.

    Locks: the run row, then the command. Errors: 404 (run, or a command of another run);
    409 `stale_lease` (recorded as `late-write-rejected`); 409 `run_terminal`; 409
    `command_terminal` for a command that ended.
    """
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        refusal = fence_runner_write(
            run, runner_id=runner_id, lease_epoch=lease_epoch, source="approval"
        )
        if refusal is None:
            existing = Approval.objects.filter(run=run, request_key=request.request_key).first()
            if existing is not None:
                return ApprovalResult(existing, changed=False)
            return ApprovalResult(_create_locked(run, request), changed=True)
    raise refusal  # after the commit, so the refusal's record is kept


def _create_locked(run: Run, request: ApprovalRequest) -> Approval:
    refuse_if_terminal(run)
    command = lock_command(request.command_id, run=run)
    if command.is_terminal:
        raise conflict(
            f"command {command.id} already ended: {command.state}",
            code="command_terminal",
            command_id=command.id,
            state=command.state,
        )
    now = timezone.now()
    approval = Approval.objects.create(
        id=new_id("apr"),
        run=run,
        command=command,
        tenant_id=run.tenant_id,
        session_id=run.session_id,
        request_key=request.request_key,
        kind=request.kind,
        summary=request.summary,
        details=request.details,
        expires_at=now + timedelta(seconds=request.ttl_s),
        created_at=now,
        updated_at=now,
    )
    _count_pending(run, +1, now=now)
    with collecting(None) as events:
        events.add(run, "approval_requested", approval_payload(approval))
    return approval


def answer_approval(
    *, run_id: str, approval_id: str, decision: str, reason: str | None, decided_by: str | None
) -> ApprovalResult:
    """A person's answer (`approve` | `deny`): the first answer wins.

    The caller has checked that the run is in its scope. Locks: the run row, then the
    approval. Errors: 404 (an approval of another run); 409 `approval_decided` naming the
    recorded decision when it was decided otherwise, expired or cancelled. An approval past
    its `expires_at` that the sweep has not reached yet is expired here (and kept so)
    before the 409: an answer never beats a deadline that has passed.
    """
    state = DECISION_STATES[decision]
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        approval = lock_approval(approval_id, run=run)
        now = timezone.now()
        if approval.is_pending and approval.expires_at <= now:
            _resolve_locked(run, [approval], state=ApprovalState.EXPIRED, reason="expired", now=now)
        elif approval.is_pending:
            _resolve_locked(
                run, [approval], state=state, reason=reason, now=now, decided_by=decided_by
            )
            return ApprovalResult(approval, changed=True)
    if approval.state == state:
        return ApprovalResult(approval, changed=False)
    raise _decided(approval)


def _decided(approval: Approval) -> AgentRunError:
    return conflict(
        f"approval {approval.id} was already resolved: {approval.state}",
        code="approval_decided",
        approval_id=approval.id,
        state=approval.state,
        decided_by=approval.decided_by,
    )


def resolve_pending_approvals_locked(
    run: Run,
    *,
    state: str,
    reason: str,
    command_id: str | None = None,
    events: PendingEvents | None = None,
) -> None:
    """Resolve the run's pending approvals (only `command_id`'s, if given) as `state`
    (`cancelled` when their command or run ends). Needs the run lock; reads nothing when the
    run has none pending. `events`: the caller's pending events, if it collects them."""
    if run.pending_approvals <= 0:
        return
    pending = lock_pending_approvals(run, command_id=command_id)
    if pending:
        _resolve_locked(run, pending, state=state, reason=reason, now=timezone.now(), events=events)


def expire_due_approvals(*, limit: int, now: datetime | None = None) -> int:
    """Expire up to `limit` pending approvals past their `expires_at`, one run per
    transaction (the run lock first, so an answer racing the expiry queues behind it and
    finds it decided). Returns how many expired."""
    cutoff = now or timezone.now()
    due = (
        Approval.objects.filter(state=ApprovalState.PENDING, expires_at__lte=cutoff)
        .order_by("expires_at")
        .values_list("run_id", "id")[:limit]
    )
    by_run: dict[str, list[str]] = {}
    for run_id, approval_id in due:
        by_run.setdefault(run_id, []).append(approval_id)
    expired = 0
    for run_id, approval_ids in by_run.items():
        with transaction.atomic(durable=True):
            try:
                run = lock_run(run_id)
            except AgentRunError:
                continue  # the run was deleted meanwhile
            found = [
                a
                for a in lock_pending_approvals(run)
                if a.id in approval_ids and a.expires_at <= cutoff
            ]
            if found:
                _resolve_locked(
                    run, found, state=ApprovalState.EXPIRED, reason="expired", now=cutoff
                )
            expired += len(found)
    return expired


def _resolve_locked(
    run: Run,
    approvals: list[Approval],
    *,
    state: str,
    reason: str | None,
    now: datetime,
    decided_by: str | None = None,
    events: PendingEvents | None = None,
) -> None:
    with collecting(events) as events:
        for approval in approvals:
            approval.state = state
            approval.reason = reason
            approval.decided_by = decided_by
            approval.decided_at = approval.updated_at = now
            approval.save(
                update_fields=["state", "reason", "decided_by", "decided_at", "updated_at"]
            )
            events.add(run, "approval_resolved", approval_payload(approval))
    _count_pending(run, -len(approvals), now=now)


def _count_pending(run: Run, delta: int, *, now: datetime) -> None:
    run.pending_approvals = max(0, run.pending_approvals + delta)
    run.updated_at = now
    run.save(update_fields=["pending_approvals", "updated_at"])
