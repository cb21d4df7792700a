"""deploy/kubernetes/ against the real API server: every manifest passes server-side
dry-run (schema, defaults, admission), and the launcher works under the manifests' least
RBAC, as the workers' service account, and can do nothing more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dispatch.launchers import JobState
from dispatch.launchers.kubernetes import KubernetesLauncher
from runs.models import RunnerJob
from tests.dispatch.helpers import launch_request
from tests.support.kube_cluster import LAUNCHER_ACCOUNT, KubeCluster

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KINDS = {
    "configmap/agentrun-config",
    "secret/agentrun-secrets",
    "serviceaccount/agentrun",
    "serviceaccount/agentrun-launcher",
    "serviceaccount/agentrun-runner",
    "role.rbac.authorization.k8s.io/agentrun-launcher",
    "rolebinding.rbac.authorization.k8s.io/agentrun-launcher",
    "job.batch/agentrun-migrate-0-1-0",
    "deployment.apps/agentrun-api",
    "service/agentrun-api",
    "deployment.apps/agentrun-worker",
    "deployment.apps/agentrun-beat",
}


@pytest.fixture(scope="module")
def agentrun_namespace(kube_cluster: KubeCluster) -> str:
    """The manifests' namespace, created for real (a dry-run namespace would not exist for
    the objects in it)."""
    if kube_cluster.kubectl("get", "namespace", "agentrun", check=False).returncode != 0:
        kube_cluster.kubectl("create", "namespace", "agentrun")
    return "agentrun"


def test_every_manifest_passes_server_side_dry_run(
    kube_cluster: KubeCluster, agentrun_namespace: str
) -> None:
    done = kube_cluster.kubectl("apply", "--dry-run=server", "-f", f"{MANIFESTS}/")
    applied = {line.split()[0] for line in done.stdout.splitlines() if "(server dry run)" in line}
    assert applied == KINDS, done.stdout
    # A dry run persists nothing.
    listed = kube_cluster.kubectl("get", "deployments,jobs,roles", "-n", agentrun_namespace)
    assert "agentrun-api" not in listed.stdout + listed.stderr


def test_the_launcher_works_with_the_manifests_rbac_and_can_do_nothing_more(
    kube_cluster: KubeCluster, agentrun_namespace: str, settings: Any
) -> None:
    kube_cluster.kubectl("apply", "-f", f"{MANIFESTS}/10-rbac.yaml")
    settings.AGENTRUN_LAUNCH_PROFILES = {"default": {"launcher": "kubernetes", "image": "r:1"}}
    settings.AGENTRUN_KUBERNETES_NAMESPACE = agentrun_namespace
    launcher = KubernetesLauncher(clients=kube_cluster.clients(as_launcher=True))
    request = launch_request(runner_job_id="rjob_rbac1")
    first = launcher.launch(request)
    assert launcher.launch(request).outcome == "existing"  # get jobs; update secrets
    job = RunnerJob(job_name=first.job_name, namespace=first.namespace)
    assert launcher.observe(job) == JobState.ACTIVE  # get jobs/status
    launcher.abort(first)
    assert launcher.observe(job) == JobState.MISSING

    def can(verb: str, resource: str, namespace: str = agentrun_namespace) -> str:
        done = kube_cluster.kubectl(
            "auth", "can-i", verb, resource, "-n", namespace, f"--as={LAUNCHER_ACCOUNT}",
            check=False,
        )  # fmt: skip
        return done.stdout.strip()

    assert [can("create", "jobs.batch"), can("delete", "secrets")] == ["yes", "yes"]
    # Not a runner key back, not a pod of its own, not another namespace.
    assert can("get", "secrets") == can("list", "secrets") == "no"
    assert can("create", "pods") == can("list", "jobs.batch") == "no"
    assert can("create", "jobs.batch", namespace="default") == "no"
