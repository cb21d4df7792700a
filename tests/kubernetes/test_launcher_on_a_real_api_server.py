"""The `kubernetes` launcher against a real kube-apiserver 1.20 with its Job controller,
garbage collector and TTL controller (tests/support/kube_cluster.py; no skip: a missing
build fails and says how to make it).

Issue 23's probe found the runner key's Secret leaked on every launch (no owner, abort
deleted only the Job): 202 Secrets after 200 launches. Here every Secret is owned by its
Job and goes with it, and a Job that fails before its runner claims the run is retried.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import override_settings

from dispatch.launchers import JobState, Launched
from dispatch.launchers.kubernetes import KubernetesLauncher, job_name
from dispatch.models import IntentState
from dispatch.services.launch import dispatch_batch
from dispatch.services.reconcile import reconcile_runner_jobs
from runs.models import Run, RunnerJob
from tests.dispatch.helpers import intent_of, launch_request, make_dispatch_command, phases
from tests.support.kube_cluster import PodStandIn, wait_until


@pytest.fixture(autouse=True)
def _profiles(settings: Any, namespace: str) -> None:
    settings.AGENTRUN_LAUNCH_PROFILES = {
        "default": {"launcher": "kubernetes", "image": "runner:test", "namespace": namespace},
        "short": {
            "launcher": "kubernetes",
            "image": "runner:test",
            "namespace": namespace,
            "ttl_seconds_after_finished": 0,
            "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "256Mi"}},
        },
    }


def _exists(read: Any, name: str, namespace: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        read(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def _observed(launcher: KubernetesLauncher, launched: Launched) -> str:
    job = RunnerJob(job_name=launched.job_name, namespace=launched.namespace)
    return launcher.observe(job)


def test_launch_then_relaunch_finds_the_job_and_abort_deletes_job_and_secret(
    clients: Any, namespace: str
) -> None:
    batch, core, _ = clients
    launcher = KubernetesLauncher(clients=clients)
    request = launch_request(runner_job_id="rjob_relaunch1")
    first = launcher.launch(request)
    again = launcher.launch(launch_request(runner_job_id="rjob_relaunch1", runner_key="newer"))
    assert (first.outcome, again.outcome) == ("launched", "existing")
    assert first.namespace == namespace and first.job_name == job_name("rjob_relaunch1")
    job = batch.read_namespaced_job(first.job_name, namespace)
    secret = core.read_namespaced_secret(first.job_name, namespace)
    (owner,) = secret.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("Job", job.metadata.name, job.metadata.uid)
    assert secret.data["runner-key"] == "bmV3ZXI="  # base64 "newer": the relaunch's key
    pod = job.spec.template.spec
    assert pod.enable_service_links is False and pod.automount_service_account_token is False
    assert "newer" not in repr(job.to_dict())  # the key is only in the Secret
    assert _observed(launcher, first) == JobState.ACTIVE

    launcher.abort(first)
    assert not _exists(batch.read_namespaced_job, first.job_name, namespace)
    assert not _exists(core.read_namespaced_secret, first.job_name, namespace)
    assert _observed(launcher, first) == JobState.MISSING
    launcher.abort(first)  # again: nothing left, no error


def test_job_states_succeeded_and_failed_and_the_ttl_takes_job_and_secret(
    clients: Any, namespace: str, pods: PodStandIn
) -> None:
    batch, core, _ = clients
    launcher = KubernetesLauncher(clients=clients)
    done = launcher.launch(launch_request(runner_job_id="rjob_done1"))
    failed = launcher.launch(launch_request(runner_job_id="rjob_fails1"))
    pods.finish(namespace, done.job_name, "Succeeded")
    pods.finish(namespace, failed.job_name, "Failed")
    wait_until(
        lambda: _observed(launcher, done) == JobState.SUCCEEDED, timeout=60, what="succeeded"
    )
    wait_until(lambda: _observed(launcher, failed) == JobState.FAILED, timeout=60, what="failed")
    launcher.abort(done)
    launcher.abort(failed)

    # ttlSecondsAfterFinished (0 in this profile): the TTL controller deletes the finished
    # Job, and the garbage collector its Secret.
    short = launcher.launch(
        launch_request(runner_job_id="rjob_ttl1", options={"launch_profile": "short"})
    )
    job = batch.read_namespaced_job(short.job_name, namespace)
    assert job.spec.ttl_seconds_after_finished == 0
    resources = job.spec.template.spec.containers[0].resources
    assert (resources.requests, resources.limits) == ({"cpu": "100m"}, {"memory": "256Mi"})
    pods.finish(namespace, short.job_name, "Succeeded")
    # The TTL controller deletes in the foreground: the Job goes after its dependents.
    wait_until(
        lambda: not _exists(batch.read_namespaced_job, short.job_name, namespace),
        timeout=90,
        what="the TTL controller to delete the finished Job",
    )
    assert not _exists(core.read_namespaced_secret, short.job_name, namespace)


def test_200_launches_leave_no_secret_once_their_jobs_are_deleted(
    kube_cluster: Any, clients: Any, settings: Any
) -> None:
    _, core, _ = clients
    namespace = kube_cluster.create_namespace("agentrun-burst")
    burst = {"launcher": "kubernetes", "image": "runner:test", "namespace": namespace}
    settings.AGENTRUN_LAUNCH_PROFILES = {"burst": burst}
    launcher = KubernetesLauncher(clients=clients)
    started = time.monotonic()
    for number in range(200):
        launcher.launch(
            launch_request(
                runner_job_id=f"rjob_burst{number:03d}", options={"launch_profile": "burst"}
            )
        )
    launched_s = time.monotonic() - started
    assert len(core.list_namespaced_secret(namespace).items) == 200
    # An operator's (or the TTL controller's) delete of the Jobs, nothing else: the
    # collector must take the Secrets.
    kube_cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    wait_until(
        lambda: not core.list_namespaced_secret(namespace).items,
        timeout=120,
        what="the garbage collector to delete the 200 Secrets",
    )
    print(f"\n200 launches in {launched_s:.1f}s; 0 Secrets left after deleting their Jobs")


@pytest.mark.django_db(transaction=True)
def test_a_job_failing_before_its_runner_starts_is_observed_failed_and_retried_by_dispatch(
    clients: Any, namespace: str, pods: PodStandIn
) -> None:
    batch, core, _ = clients
    launchers = {"kubernetes": KubernetesLauncher(clients=clients)}
    command = make_dispatch_command()
    with override_settings(
        AGENTRUN_DISPATCH_BACKOFF_BASE_MS=0,
        AGENTRUN_DISPATCH_BACKOFF_CAP_MS=0,
        AGENTRUN_DISPATCH_MAX_ATTEMPTS=2,
    ):
        assert dispatch_batch(owner="w", launchers=launchers).dispatched == 1
        first = RunnerJob.objects.get(run=command.run_id)
        counts = _fail_and_reconcile(first, launchers, pods)
        assert (counts.relaunched, counts.terminalized) == (1, 0)
        intent = intent_of(command)
        assert intent.state == IntentState.RETRY and intent.runner_job_id != first.idempotency_key
        # Reconciliation cleaned up the failed Job and its key Secret.
        assert not _exists(batch.read_namespaced_job, first.job_name, namespace)
        assert not _exists(core.read_namespaced_secret, first.job_name, namespace)

        assert dispatch_batch(owner="w", launchers=launchers).dispatched == 1  # attempt 2
        second = RunnerJob.objects.exclude(pk=first.pk).get(run=command.run_id)
        assert second.job_name != first.job_name
        assert launchers["kubernetes"].observe(second) == JobState.ACTIVE
        assert reconcile_runner_jobs(limit=10, grace_ms=0, launchers=launchers).terminalized == 0
        assert Run.objects.get(pk=command.run_id).status == "pending"

        # The last attempt's Job fails too: no attempt left, so the run fails visibly.
        counts = _fail_and_reconcile(second, launchers, pods)
        assert (counts.relaunched, counts.terminalized) == (0, 1)
    run = Run.objects.get(pk=command.run_id)
    assert (run.status, run.failure_kind) == ("failed", "infra-failed")
    assert phases(run).count("runner-dispatched") == 2
    assert "runner-dispatch-retry" in phases(run) and "runner-gone" in phases(run)
    assert not _exists(core.read_namespaced_secret, second.job_name, namespace)


def _fail_and_reconcile(job: RunnerJob, launchers: Any, pods: PodStandIn) -> Any:
    """Fail the Job's pod, wait until the launcher sees the Job failed, reconcile once."""
    pods.finish(job.namespace, job.job_name, "Failed")
    wait_until(
        lambda: launchers["kubernetes"].observe(job) == JobState.FAILED,
        timeout=60,
        what=f"job {job.job_name} to fail",
    )
    return reconcile_runner_jobs(limit=10, grace_ms=0, launchers=launchers)
