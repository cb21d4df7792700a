"""The run lifecycle and the runner lease protocol: create, claim, heartbeat, finish.

Status moves `pending → claimed → running → terminal` and never out of terminal. A claim
sets `claimed_by`, the lease expiry and a new `lease_epoch`, mirrored in `agentrun_leases`
for the reaper's index. Runner writes are checked against the live claim by
`event_log.fence_runner_write`; a refused write is recorded, committed, then raised. Ending
a run (its status, open commands, claim and thread) is `runs.services.terminal`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agentrun.errors import conflict, invalid, lease_conflict
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from agentrun.locks import LockKey, advisory_xact_lock
from agentrun.row_inserts import Check, insert_row, pending_inserts
from dispatch import intents
from runs.locks import extend_live_lease, lock_run, lock_run_commands
from runs.models import (
    Backend,
    Command,
    CommandState,
    FailureKind,
    Lease,
    Run,
    RunStatus,
)
from runs.phases import Phase
from runs.services.event_log import PendingEvents, append_event_locked, fence_runner_write
from runs.services.fencing import ended_run_reason
from runs.services.refusals import record_losing_report_locked, refuse_if_terminal
from runs.services.terminal import (
    TurnResult,
    close_open_commands_locked,
    fence_finish_report,
    record_thread_locked,
    release_claim_locked,
    terminalize_run_locked,
)
from runs.sql import backend_exists_check
from sessions import projection

if TYPE_CHECKING:
    from sessions.models import Session


log = logging.getLogger("agentrun.runs")


@dataclass(frozen=True)
class RunSpec:
    """What a client asks for when it creates a run (tenant comes from its key)."""

    project_id: str
    workspace_ref: dict[str, Any]
    provider_id: str
    backend_profile: str
    execution_policy: dict[str, Any] = field(default_factory=dict)
    session_ref: dict[str, Any] | None = None
    resource_bundle_ref: dict[str, Any] | None = None
    trace_sink: dict[str, Any] | None = None

    @classmethod
    def from_request(
        cls, data: Mapping[str, Any], *, session_ref: dict[str, Any] | None
    ) -> RunSpec:
        """A spec from a validated request body (a run's, or a session turn's `run`)."""
        return cls(
            project_id=data["project_id"],
            workspace_ref=dict(data["workspace_ref"]),
            provider_id=data["provider_id"],
            backend_profile=data["backend_profile"],
            execution_policy=data.get("execution_policy") or {},
            session_ref=session_ref,
            resource_bundle_ref=data.get("resource_bundle_ref"),
            trace_sink=data.get("trace_sink"),
        )

    def fingerprint(self, tenant_id: str) -> str:
        session_id = (self.session_ref or {}).get("session_id")
        return stable_hash(
            [
                tenant_id,
                self.project_id,
                self.workspace_ref,
                self.provider_id,
                self.backend_profile,
                self.execution_policy,
                session_id,
                self.resource_bundle_ref,
                self.trace_sink,
            ]
        )


def run_fingerprint(run: Run) -> str:
    spec = RunSpec(
        project_id=run.project_id,
        workspace_ref=run.workspace_ref,
        provider_id=run.provider_id,
        backend_profile=run.backend_profile,
        execution_policy=run.execution_policy,
        session_ref=run.session_ref,
        resource_bundle_ref=run.resource_bundle_ref,
        trace_sink=run.trace_sink,
    )
    return spec.fingerprint(run.tenant_id)


@dataclass(frozen=True)
class CreatedRun:
    run: Run
    created: bool
    session: Session | None = None  # a created run's session row, locked


def create_run(*, tenant_id: str, spec: RunSpec, run_id: str | None = None) -> CreatedRun:
    """Create a run, or replay the caller-reserved `run_id` (seed `createRunWithClient`).

    A `session_ref` creates its session or checks the run fits it (tenant, project,
    backend). Locks: with a reserved id, a transaction advisory lock on it, so concurrent
    replays of one id serialise; the session row. Errors: 400 unknown backend profile; 409
    when the reserved id exists with a different input; 409 `session_boundary`.
    """
    with transaction.atomic(durable=True):
        return create_run_locked(tenant_id=tenant_id, spec=spec, run_id=run_id)


def create_run_locked(
    *, tenant_id: str, spec: RunSpec, run_id: str | None, session: Session | None = None
) -> CreatedRun:
    """`create_run` inside the caller's transaction (session turn admission uses it, passing
    the `session` row when it has locked it already)."""
    if run_id is not None:
        advisory_xact_lock(LockKey.CREATE_RUN, run_id)
        existing = Run.objects.filter(pk=run_id).first()
        if existing is not None:
            if run_fingerprint(existing) != spec.fingerprint(tenant_id):
                raise conflict(f"run {run_id} already exists with a different input")
            return CreatedRun(existing, created=False)
    _check_backend(spec.backend_profile)
    session_ref = spec.session_ref
    if session_ref is None:
        session = None
    else:
        session = projection.ensure_session_for_run_locked(
            tenant_id=tenant_id,
            project_id=spec.project_id,
            backend_profile=spec.backend_profile,
            session_ref=session_ref,
            session=session,
        )
        session_ref = projection.session_ref_of_run(session, session_ref)
    now = timezone.now()
    # The spec's fields are the run's columns; the session's own spelling of its ref wins.
    run = Run(
        **{**asdict(spec), "session_ref": session_ref},
        id=run_id or new_id("run"),
        tenant_id=tenant_id,
        status=RunStatus.PENDING,
        created_at=now,
        updated_at=now,
    )
    insert_row(run)  # now, or with the caller's other new rows (`agentrun.row_inserts`)
    projection.touch_session_for_run_locked(run, bump=False, session=session, last_run_id=run.id)
    return CreatedRun(run, created=True, session=session)


def _check_backend(profile: str) -> None:
    """400 unless the backend profile exists: now, or (inside a collecting block, where the
    run is inserted at its end) in the insert statement, a round trip saved."""

    def unknown() -> Exception:
        return invalid(
            f"backend_profile: unknown backend profile {profile!r}", field="backend_profile"
        )

    pending = pending_inserts()
    if pending is not None:
        pending.require(Check(*backend_exists_check(profile), refusal=unknown))
    elif not Backend.objects.filter(profile=profile).exists():
        raise unknown()


def claim_run(*, run_id: str, runner_id: str, lease_ms: int) -> Run:
    """Claim a run for a runner with a lease; every claim starts a new lease epoch.

    Locks: the run row. Errors: 404; 409 when the run is terminal; 409
    `runner-lease-conflict` while another runner holds an unexpired lease.
    Side effects: upserts `agentrun_leases`, appends `backend_status {phase: run-claimed}`.
    """
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        refuse_if_terminal(run)
        now = timezone.now()
        previous = run.claimed_by
        if previous and previous != runner_id and not run.lease_expired(now):
            raise lease_conflict(f"run {run_id} is already claimed", run_id=run_id)
        run.status = RunStatus.CLAIMED
        run.claimed_by = runner_id
        run.lease_expires_at = now + timedelta(milliseconds=lease_ms)
        run.lease_epoch += 1
        run.updated_at = now
        run.save(
            update_fields=["status", "claimed_by", "lease_expires_at", "lease_epoch", "updated_at"]
        )
        Lease.objects.update_or_create(
            run=run,
            defaults={
                "runner_id": runner_id,
                "lease_expires_at": run.lease_expires_at,
                "lease_epoch": run.lease_epoch,
                "updated_at": now,
            },
        )
        projection.project_claim_locked(run)
        append_event_locked(
            run=run,
            type="backend_status",
            payload={
                "phase": Phase.RUN_CLAIMED,
                "runner_id": runner_id,
                "lease_epoch": run.lease_epoch,
                "previous_runner_id": previous if previous != runner_id else None,
            },
        )
    log.info(
        "run claimed",
        extra={"run_id": run.id, "runner_id": runner_id, "lease_epoch": run.lease_epoch},
    )
    return run


def heartbeat_run(*, run_id: str, runner_id: str, lease_epoch: int, lease_ms: int) -> Run:
    """Extend the live claim's lease. A terminal run is returned unchanged: that is how a
    runner learns it was cancelled.

    Locks: the run row. Errors: 404; 409 `stale_lease` when the claim is not current.
    A heartbeat of the live claim is one statement (`runs.locks.extend_live_lease`); any
    other takes the run's lock here and is answered as before.
    """
    beat = _extend_lease(
        run_id=run_id, runner_id=runner_id, lease_epoch=lease_epoch, lease_ms=lease_ms
    )
    if beat is not None:
        return beat
    return _heartbeat_not_live(
        run_id=run_id, runner_id=runner_id, lease_epoch=lease_epoch, lease_ms=lease_ms
    )


def _extend_lease(*, run_id: str, runner_id: str, lease_epoch: int, lease_ms: int) -> Run | None:
    now = timezone.now()
    return extend_live_lease(
        run_id=run_id,
        runner_id=runner_id,
        lease_epoch=lease_epoch,
        expires_at=now + timedelta(milliseconds=lease_ms),
        now=now,
    )


def _heartbeat_not_live(*, run_id: str, runner_id: str, lease_epoch: int, lease_ms: int) -> Run:
    """A heartbeat that did not hold the live claim when its statement ran, under the run's
    lock: refused and recorded when stale, the run returned as it is when it ended; should
    the claim be live by now after all, extended by the same statement, under the lock."""
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        refusal = fence_runner_write(
            run, runner_id=runner_id, lease_epoch=lease_epoch, source="heartbeat"
        )
        if refusal is None and not run.is_terminal:
            extended = _extend_lease(
                run_id=run_id, runner_id=runner_id, lease_epoch=lease_epoch, lease_ms=lease_ms
            )
            run = extended or run
    if refusal:
        raise refusal
    return run


def finish_run(*, run_id: str, runner_id: str, lease_epoch: int, result: TurnResult) -> Run:
    """Terminalise a run with the runner's result (seed `finishRun`).

    Locks: the run row, then its commands. Finishing a terminal run changes nothing but
    releases a leftover claim; a report that disagrees with how the run ended (cancelled,
    failed by the reaper, …) is recorded as a `late-write-rejected` event.
    Errors: 404; 409 `stale_lease`.
    """
    with transaction.atomic(durable=True):
        run = lock_run(run_id)
        commands = lock_run_commands(run)
        refusal = fence_finish_report(run, runner_id, lease_epoch, result, source="run-status")
        if refusal is None and run.is_terminal:
            release_claim_locked(run)
            intents.fence_open_intents_locked(run=run, reason="run is terminal")
            if result.terminal_status != run.status:  # a report that disagrees is kept
                record_losing_report_locked(
                    run,
                    source="run-status",
                    runner_id=runner_id,
                    reason=ended_run_reason(run),
                    result=result,
                )
        elif refusal is None:
            _finish_live_run_locked(run, commands, result=result)
    log.info(
        "run finish reported",
        extra={
            "run_id": run.id,
            "runner_id": runner_id,
            "status": run.status,
            "reported": result.terminal_status,
            "refused": refusal is not None,
        },
    )
    if refusal:
        raise refusal
    return run


def _finish_live_run_locked(run: Run, commands: list[Command], *, result: TurnResult) -> None:
    """The runner's report ends a live run: its thread, its open commands, its status; the
    events of all three appended together."""
    events = PendingEvents()
    record_thread_locked(run, result=result, events=events)
    close_open_commands_locked(
        run,
        commands,
        state=CommandState.CANCELLED,
        failure_kind=FailureKind.CANCELLED,
        reason="run-finished",
        message=f"the run was finished ({result.terminal_status}) before this command ran",
        events=events,
    )
    terminalize_run_locked(run, result=result, events=events)
    events.append_locked()
