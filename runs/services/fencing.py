"""Late-write fencing: how a runner's report that is no longer current is recognised.

Two fences (SPEC §2, §8):
- the lease epoch: every claim increments `runs.lease_epoch`; a runner write carrying
  another epoch, or from a runner that does not hold the live claim, is stale and refused
  with 409 `stale_lease`, even when a zombie runner reuses its id;
- cancellation: cancel is authoritative, so the claiming runner's later output and its
  terminal report are kept as `backend_status {phase: late-write-rejected}` events;
- the end of a run: a completed, failed (by its runner or the reaper) or blocked run takes
  no more output from any runner; the batch is refused with 409 `run_terminal` and kept as
  a `late-write-rejected` event, and a terminal report that disagrees is recorded the same
  way. Nothing a runner sends can appear after the run's `terminal_status`.

Refusals are recorded as events so an operator sees what was refused and from whom.
These helpers are pure: they decide and build payloads; the services write.
"""

from __future__ import annotations

from typing import Any

from runs.models import Run, RunStatus
from runs.phases import Phase


def stale_claim_reason(run: Run, *, runner_id: str, lease_epoch: int) -> str | None:
    """Why a runner write against `run` is stale, or None when it holds the current claim.

    A terminal run with a matching epoch is not stale: its late reports are handled by the
    seed's late-write rules (kept and marked), so a runner can still learn it was cancelled.
    """
    if lease_epoch != run.lease_epoch:
        return f"lease epoch {lease_epoch} is not the current epoch {run.lease_epoch}"
    if run.is_terminal:
        return None
    if run.claimed_by is None:
        return "the run is not claimed"
    if run.claimed_by != runner_id:
        return "the run is claimed by another runner"
    return None


def ended_run_reason(run: Run) -> str:
    """The reason recorded when a runner writes to a terminal run."""
    if run.status == RunStatus.CANCELLED:
        return "the run was cancelled"
    return f"the run already ended ({run.status})"


def refuses_output(run: Run) -> bool:
    """Whether a runner's output batch to `run` is refused outright (409): the run ended
    other than by a cancel, whose late output the seed keeps, marked, in the log."""
    return run.is_terminal and run.status != RunStatus.CANCELLED


def late_write_payload(
    run: Run, *, source: str, runner_id: str | None, reason: str, **refused: Any
) -> dict[str, Any]:
    """The `backend_status {phase: late-write-rejected}` payload recording a refused write."""
    return {
        "phase": Phase.LATE_WRITE_REJECTED,
        "source": source,
        "reason": reason,
        "runner_id": runner_id,
        "run_status": run.status,
        "lease_epoch": run.lease_epoch,
        "cancel_request_id": run.cancel_request_id,
        "cancel_epoch": run.cancel_epoch,
        **refused,
    }
