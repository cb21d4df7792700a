"""The `kubernetes` launcher's manifests and its calls, against an in-memory stand-in.

The same launcher against a real API server (launch, relaunch, abort, 200 launches, a
failing Job retried by dispatch) is tests/kubernetes/test_launcher_on_a_real_api_server.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dispatch.launchers import LaunchRequest
from dispatch.launchers.kubernetes import (
    KubernetesLauncher,
    job_manifest,
    job_name,
)
from tests.dispatch.helpers import launch_request


def _request(**overrides: Any) -> LaunchRequest:
    return launch_request(**{"options": {"launch_profile": "k8s"}, **overrides})


@pytest.fixture(autouse=True)
def _launch_profiles(settings: Any) -> None:
    settings.AGENTRUN_LAUNCH_PROFILES = {
        "k8s": {
            "launcher": "kubernetes",
            "image": "registry/runner:1",
            "service_account_name": "runner",
        },
        "sized": {
            "launcher": "kubernetes",
            "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}},
            "ttl_seconds_after_finished": 60,
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

    def create_namespaced_job(self, namespace: str, body: Any) -> Any:
        self._create(self.jobs, namespace, body)
        return self.read_namespaced_job(body["metadata"]["name"], namespace)

    def read_namespaced_job(self, name: str, namespace: str) -> Any:
        return SimpleNamespace(metadata=SimpleNamespace(uid=f"uid-{namespace}-{name}"))

    def create_namespaced_secret(self, namespace: str, body: Any) -> None:
        self._create(self.secrets, namespace, body)

    def delete_namespaced_secret(self, name: str, namespace: str) -> None:
        self.secrets.pop((namespace, name), None)

    def replace_namespaced_secret(self, name: str, namespace: str, body: Any) -> None:
        self.secrets[(namespace, name)] = body

    def read_namespaced_job_status(self, name: str, namespace: str) -> Any:
        if (namespace, name) not in self.jobs:
            raise ApiError(404)
        status = SimpleNamespace(active=None, succeeded=None, failed=1, conditions=None)
        return SimpleNamespace(status=status)

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


def test_the_secret_is_owned_by_its_job_and_abort_deletes_both() -> None:
    cluster = FakeCluster()
    launched = KubernetesLauncher(clients=(cluster, cluster, (ApiError,))).launch(_request())
    secret = cluster.secrets[("agentrun", launched.job_name)]
    (owner,) = secret["metadata"]["ownerReferences"]
    assert owner == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": launched.job_name,
        "uid": f"uid-agentrun-{launched.job_name}",
    }
    KubernetesLauncher(clients=(cluster, cluster, (ApiError,))).abort(launched)
    assert cluster.jobs == {} and cluster.secrets == {}


def test_resources_and_ttl_come_from_the_profile_and_the_pod_gets_no_extra_environment() -> None:
    manifest = job_manifest(_request(options={"launch_profile": "sized"}), name="j", namespace="n")
    assert manifest["spec"]["ttlSecondsAfterFinished"] == 60
    pod = manifest["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}
    # No Service host/port variables, no API token: the runner needs only its ids and key.
    assert pod["enableServiceLinks"] is False and pod["automountServiceAccountToken"] is False
    assert {item["name"] for item in container["env"]} == {
        "AGENTRUN_API_URL",
        "AGENTRUN_RUN_ID",
        "AGENTRUN_COMMAND_ID",
        "AGENTRUN_RUNNER_ID",
        "AGENTRUN_RUNNER_JOB_ID",
        "AGENTRUN_RUNNER_KEY",
    }
    default = job_manifest(_request(), name="j", namespace="n")
    assert default["spec"]["ttlSecondsAfterFinished"] == 3600  # AGENTRUN_KUBERNETES_JOB_TTL_S
    assert "resources" not in default["spec"]["template"]["spec"]["containers"][0]
