"""Relaunch a runner job that failed before its runner started (issue 23).

A Kubernetes Job can fail without its runner ever running: the image cannot be pulled,
the node is lost, the pod is evicted before it starts. Its run was never claimed, so
nothing of the turn has happened and it is safe to launch again: reconciliation hands the
intent back to dispatch (`retry`, due after the usual backoff) instead of failing the run.
The next attempt plans a fresh runner job id, so it gets a Job of its own (a stable name
would find the failed one, `existing`) and a runner job record of its own; the failed
record is marked `superseded` and only observed from then on.

A runner that claimed its run (`lease_epoch > 0`) may have done part of the turn, so its
Job failing still fails the run (reconciliation's retention fence). So does the last
attempt: `AGENTRUN_DISPATCH_MAX_ATTEMPTS` bounds relaunches as it bounds launch errors.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from agentrun import conf
from agentrun.backoff import backoff_ms
from agentrun.ids import new_id
from dispatch.locks import lock_intent
from dispatch.models import IntentState, RunnerDispatchIntent
from dispatch.services.failures import intent_phase
from dispatch.wakeup import wake_dispatcher_for_due
from runs.locks import lock_command, lock_run, lock_runner_job
from runs.models import RunnerJob
from runs.phases import Phase
from runs.services.event_log import append_event_locked

SUPERSEDED = "superseded"


def relaunch_unstarted_job(*, job: RunnerJob, job_state: str) -> bool:
    """Give the intent of a failed, never-claimed runner job back to dispatch.
    (Reconciliation calls it for `failed` jobs only: see `reconcile`.)

    Returns whether it did; False (nothing changed) when the run is terminal or was
    claimed, the job is not the intent's current one, or the attempts are used up.
    Locks: run → command → intent → runner job. Side effects: intent `retry` with a new
    planned runner job id, the job's result `superseded`, a `backend_status
    {phase: runner-dispatch-retry, reason: runner-job-<state>}` event.
    """
    with transaction.atomic(durable=True):
        run = lock_run(job.run_id)
        command = lock_command(job.command_id, run=run)
        intent = RunnerDispatchIntent.objects.filter(command=command).first()
        if intent is None or run.is_terminal or run.lease_epoch > 0 or run.claimed_by:
            return False
        intent = lock_intent(intent.id)
        if (
            intent.state != IntentState.DISPATCHED
            or intent.actual_runner_job_id != job.id
            or intent.attempt_count >= conf.dispatch_max_attempts()
        ):
            return False
        delay = backoff_ms(
            intent.attempt_count,
            base_ms=conf.dispatch_backoff_base_ms(),
            cap_ms=conf.dispatch_backoff_cap_ms(),
        )
        now = timezone.now()
        error = {
            "reason": f"runner-job-{job_state}",
            "message": f"runner job {job.id} ({job.job_name}) is {job_state} before its "
            "runner claimed the run",
            "runner_job_id": job.id,
        }
        intent.state = IntentState.RETRY
        intent.runner_job_id = new_id("rjob")
        intent.next_attempt_at = now + timedelta(milliseconds=delay)
        intent.last_error = error
        intent.actual_runner_job_id = intent.active_runner_id = None
        intent.updated_at = now
        intent.save(
            update_fields=[
                "state",
                "runner_job_id",
                "next_attempt_at",
                "last_error",
                "actual_runner_job_id",
                "active_runner_id",
                "updated_at",
            ]
        )
        locked_job = lock_runner_job(job.id)
        locked_job.result = {**locked_job.result, SUPERSEDED: True}
        locked_job.updated_at = now
        locked_job.save(update_fields=["result", "updated_at"])
        append_event_locked(
            run=run,
            type="backend_status",
            payload={
                **intent_phase(Phase.RUNNER_DISPATCH_RETRY, intent),
                **error,
                "delay_ms": delay,
                "next_attempt_at": intent.next_attempt_at.isoformat(),
                "next_runner_job_id": intent.runner_job_id,
            },
        )
        if delay <= 0:
            transaction.on_commit(wake_dispatcher_for_due)
    return True
