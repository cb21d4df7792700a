"""The `kubernetes` launcher: the Job it builds, idempotency by job name, and (when a
cluster is reachable) a real Job. Without the optional `kubernetes` package or a cluster
the last test is skipped and says why."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

from dispatch.launchers import LaunchRequest
from dispatch.launchers.kubernetes import (
    KubernetesLauncher,
    job_manifest,
    job_name,
    load_clients,
)


def _request(**overrides: Any) -> LaunchRequest:
    values: dict[str, Any] = {
        "intent_id": "rdi_1",
        "run_id": "run_01ABC",
        "command_id": "cmd_1",
        "tenant_id": "t",
        "backend_profile": "codex",
        "runner_job_id": "rjob_01JD3KXYZ",
        "runner_id": "runner_01JD3KXYZ",
        "attempt_count": 1,
        "runner_key": "ar_runner_secret",
        "api_url": "http://agentrun:8000",
        "options": {"launch_profile": "k8s"},  # image and account: the operator's profile
    }
    values.update(overrides)
    return LaunchRequest(**values)


@pytest.fixture(autouse=True)
def _launch_profiles(settings: Any) -> None:
    settings.AGENTRUN_LAUNCH_PROFILES = {
        "k8s": {
            "launcher": "kubernetes",
            "image": "registry/runner:1",
            "service_account_name": "runner",
        },
        "real": {
            "launcher": "kubernetes",
            "image": "busybox",
            "namespace": os.environ.get("AGENTRUN_TEST_KUBERNETES_NAMESPACE", "default"),
        },
    }


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class FakeCluster:
    """Stands in for the Kubernetes API server: objects by (namespace, name)."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], Any] = {}
        self.secrets: dict[tuple[str, str], Any] = {}

    def create_namespaced_job(self, namespace: str, body: Any) -> None:
        self._create(self.jobs, namespace, body)

    def create_namespaced_secret(self, namespace: str, body: Any) -> None:
        self._create(self.secrets, namespace, body)

    def replace_namespaced_secret(self, name: str, namespace: str, body: Any) -> None:
        self.secrets[(namespace, name)] = body

    def read_namespaced_job_status(self, name: str, namespace: str) -> Any:
        if (namespace, name) not in self.jobs:
            raise ApiError(404)
        return SimpleNamespace(status=SimpleNamespace(active=None, succeeded=None, failed=1))

    def delete_namespaced_job(self, name: str, namespace: str, **_: Any) -> None:
        self.jobs.pop((namespace, name), None)

    @staticmethod
    def _create(store: dict[tuple[str, str], Any], namespace: str, body: Any) -> None:
        key = (namespace, body["metadata"]["name"])
        if key in store:
            raise ApiError(409)
        store[key] = body


def test_the_job_is_a_dns_safe_single_pod_job_with_the_key_in_a_secret() -> None:
    name = job_name("rjob_01JD3KXYZ")
    assert name == "agentrun-rjob-01jd3kxyz"
    manifest = job_manifest(_request(), name=name, namespace="agents")
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "Job")
    assert manifest["spec"]["backoffLimit"] == 0
    pod = manifest["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "runner"
    container = pod["containers"][0]
    assert container["image"] == "registry/runner:1"
    assert container["args"] == ["python", "-m", "runner", "run", "--run", "run_01ABC"]
    env = {item["name"]: item for item in container["env"]}
    assert env["AGENTRUN_API_URL"]["value"] == "http://agentrun:8000"
    assert env["AGENTRUN_RUNNER_KEY"]["valueFrom"]["secretKeyRef"]["name"] == name
    assert "ar_runner_secret" not in repr(manifest)  # the key lives only in the Secret
    assert len(job_name("rjob_" + "X" * 100)) <= 63


def test_a_second_launch_of_the_same_runner_job_finds_the_existing_job() -> None:
    cluster = FakeCluster()
    launcher = KubernetesLauncher(clients=(cluster, cluster, (ApiError,)))
    first = launcher.launch(_request())
    again = launcher.launch(_request(attempt_count=2, runner_key="ar_runner_newer"))
    assert (first.outcome, again.outcome) == ("launched", "existing")
    assert first.job_name == again.job_name and len(cluster.jobs) == 1
    secret = cluster.secrets[("agentrun", first.job_name)]
    assert secret["stringData"]["runner-key"] == "ar_runner_newer"
    job = SimpleNamespace(job_name=first.job_name, namespace="agentrun")
    assert launcher.observe(job) == "failed"  # type: ignore[arg-type]
    launcher.abort(first)
    assert launcher.observe(job) == "missing"  # type: ignore[arg-type]


def test_a_real_cluster_job_is_created_idempotently() -> None:
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        _skip("the optional `kubernetes` package is not installed")
    try:
        clients = load_clients()
        clients[1].list_namespace(limit=1, _request_timeout=3)
    except Exception as error:  # any failure to reach it means "no cluster"
        _skip(f"no Kubernetes cluster is reachable ({error})")
    namespace = os.environ.get("AGENTRUN_TEST_KUBERNETES_NAMESPACE", "default")
    launcher = KubernetesLauncher(clients=clients)
    request = _request(options={"launch_profile": "real"})
    assert request.profile["namespace"] == namespace
    first = launcher.launch(request)
    try:
        assert launcher.launch(request).outcome == "existing"
        assert first.outcome == "launched"
    finally:
        launcher.abort(first)


def _skip(reason: str) -> None:
    print(f"\nskipping the real Kubernetes test: {reason}")
    pytest.skip(reason)
