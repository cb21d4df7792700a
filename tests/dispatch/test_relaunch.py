"""Reconciliation relaunches a runner job that failed before its runner claimed the run,
and only then (dispatch/services/relaunch.py). The same path against a real API server is
tests/kubernetes/test_launcher_on_a_real_api_server.py; here the cases around it."""

from __future__ import annotations

import pytest
from django.test import override_settings

from dispatch.launchers import JobState
from dispatch.models import IntentState
from dispatch.services.launch import dispatch_batch
from dispatch.services.reconcile import reconcile_runner_jobs
from runs.models import Run, RunnerJob
from runs.services.lifecycle import claim_run
from tests.dispatch.helpers import RecordingLauncher, intent_of, make_dispatch_command

pytestmark = pytest.mark.django_db(transaction=True)


class FailedJobs(RecordingLauncher):
    """Every job it launched is observed failed, as a Job whose pod failed."""

    def observe(self, job: RunnerJob) -> str:
        return JobState.FAILED


def test_a_failed_job_whose_runner_had_claimed_the_run_fails_the_run() -> None:
    launcher = FailedJobs()
    command = make_dispatch_command()
    assert dispatch_batch(owner="w", launchers={"local": launcher}).dispatched == 1
    job = RunnerJob.objects.get(run=command.run_id)
    claim_run(run_id=command.run_id, runner_id=job.runner_id, lease_ms=1)  # it started
    counts = reconcile_runner_jobs(limit=10, grace_ms=0, launchers={"local": launcher})
    assert (counts.relaunched, counts.terminalized) == (0, 1)  # part of the turn may have run
    assert Run.objects.get(pk=command.run_id).status == "failed"
    assert launcher.aborted == [job.job_name]  # and what is left of the job is cleaned up


def test_a_relaunched_job_is_only_observed_afterwards_and_its_run_waits() -> None:
    launcher = FailedJobs()
    command = make_dispatch_command()
    with override_settings(AGENTRUN_DISPATCH_BACKOFF_BASE_MS=60_000):
        dispatch_batch(owner="w", launchers={"local": launcher})
        counts = reconcile_runner_jobs(limit=10, grace_ms=0, launchers={"local": launcher})
    assert counts.relaunched == 1
    intent = intent_of(command)
    assert (intent.state, intent.actual_runner_job_id) == (IntentState.RETRY, None)
    # The superseded job is still listed (its run is live), observed, and never fails it.
    again = reconcile_runner_jobs(limit=10, grace_ms=0, launchers={"local": launcher})
    assert (again.checked, again.relaunched, again.terminalized) == (1, 0, 0)
    assert Run.objects.get(pk=command.run_id).status == "pending"
    assert RunnerJob.objects.get(run=command.run_id).result["superseded"] is True
