"""Runner job reconciliation (seed `listRunnerJobsForReconciliation` +
`withRunnerRetentionFence`).

A bounded pass over runner jobs whose run or command is not terminal, least recently
checked first: ask the job's launcher what became of it, record that on the job's result
(which also moves it to the back of the list), and when the job is over or gone while its
run is not terminal, fail the run through the retention fence
(`runs.services.reaper.terminalize_abandoned_run`), which leaves runs a live lease holds.
A job younger than `grace_ms` is only observed: a runner that was just started may not
have claimed its run yet. Safe on many workers at once: every write is fenced or locked.

A job that failed before its runner claimed the run is relaunched instead
(`relaunch`): the intent goes back to dispatch with a new planned job. A finished job the
pass has settled (relaunched, or its run failed) is aborted: its launcher deletes what is
left of it (a Kubernetes Job and its key Secret) rather than keeping it until its TTL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from dispatch.launchers import JobState, Launched, Launcher, LaunchError, default_launchers
from dispatch.services.relaunch import SUPERSEDED, relaunch_unstarted_job
from runs.models import RunnerJob
from runs.selectors import runner_jobs_for_reconciliation
from runs.services.reaper import terminalize_abandoned_run
from runs.services.runners import patch_runner_job_result


@dataclass
class ReconcileCounts:
    checked: int = 0
    active: int = 0
    gone: int = 0
    unknown: int = 0
    terminalized: int = 0
    relaunched: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def observe_job(job: RunnerJob, launchers: Mapping[str, Launcher]) -> str:
    """What the job's own launcher says about it (`JobState`); unknown launcher → unknown."""
    launcher = launchers.get(str(job.result.get("launcher")))
    if launcher is None:
        return JobState.UNKNOWN
    try:
        return launcher.observe(job)
    except LaunchError:
        return JobState.UNKNOWN


def reconcile_runner_jobs(
    *,
    limit: int,
    grace_ms: int,
    launchers: Mapping[str, Launcher] | None = None,
    dry_run: bool = False,
) -> ReconcileCounts:
    """Observe up to `limit` jobs and fail the runs whose runner is gone.

    Side effects (unless `dry_run`): `result.observed_state` / `observed_at` patched on
    each job; runs failed as `infra-failed` with a `backend_status {phase: runner-gone}`
    event. Locks: per job, the job row (patch), then per run the run and its commands.
    """
    launchers = launchers or default_launchers()
    counts = ReconcileCounts()
    settled_before = timezone.now() - timedelta(milliseconds=grace_ms)
    for job in runner_jobs_for_reconciliation(limit=max(1, min(limit, 500))):
        counts.checked += 1
        state = observe_job(job, launchers)
        counts.active += state == JobState.ACTIVE
        counts.unknown += state == JobState.UNKNOWN
        counts.gone += state in JobState.GONE
        if not dry_run:
            outcome = _record(job, state, settled_before=settled_before)
            counts.relaunched += outcome == "relaunched"
            counts.terminalized += outcome == "terminalized"
            if outcome and state in (JobState.FAILED, JobState.SUCCEEDED):
                _clean_up(job, launchers)
    return counts


def _record(job: RunnerJob, state: str, *, settled_before: datetime) -> str:
    """Patch what was observed onto the job; relaunch its intent or fail its run if its
    runner is gone. Returns what it did: "relaunched", "terminalized" or ""."""
    observed_at = timezone.now().isoformat()
    patch_runner_job_result(
        runner_job_id=job.id, patch={"observed_state": state, "observed_at": observed_at}
    )
    if state not in JobState.GONE or job.created_at > settled_before:
        return ""
    if job.result.get(SUPERSEDED):
        return ""  # a relaunch replaced it; its run waits for the new job
    # Only a launcher that saw the job fail (Kubernetes) says it ended; `missing` (the
    # local launcher's lost process) may have run and exited, so it fails the run.
    if state == JobState.FAILED and relaunch_unstarted_job(job=job, job_state=state):
        return "relaunched"
    terminalized = terminalize_abandoned_run(
        run_id=job.run_id,
        reason=f"runner job {job.id} ({job.job_name}) is {state}",
        runner_job_id=job.id,
        job_state=state,
    )
    return "terminalized" if terminalized else ""


def _clean_up(job: RunnerJob, launchers: Mapping[str, Launcher]) -> None:
    """Best effort: the launcher deletes a settled job's remains (its TTL would anyway)."""
    launcher = launchers.get(str(job.result.get("launcher")))
    if launcher is not None:
        with contextlib.suppress(LaunchError):
            launcher.abort(Launched.of_job(job))
