"""The `kubernetes` launcher: one batch/v1 Job per runner job, through the official client.

The `kubernetes` package is an optional dependency (not in requirements.txt): it is
imported when this launcher is first used, and a missing package is a launch error that
names it. The Job name comes from the intent's planned runner job id, so it is stable
across attempts and a launch is idempotent by name: a 409 on create means an earlier
attempt already created it, which is recorded as outcome `existing`. The run-scoped
runner key goes into a Secret of the same name, referenced from the pod's environment,
so it never appears in the Job spec. Image, namespace and service account come from the
operator's launch profile (`LaunchRequest.profile`), never from a client. The container
runs `python -m runner run --run ID`, which loads no Django, so a runner pod needs no
database and no server settings.
"""

from __future__ import annotations

from typing import Any

from agentrun import conf
from dispatch.launchers.base import JobState, Launched, LaunchError, LaunchRequest
from runs.models import RunnerJob

KEY_FIELD = "runner-key"

# (BatchV1Api, CoreV1Api, the exception types their calls raise)
Clients = tuple[Any, Any, tuple[type[BaseException], ...]]


def job_name(runner_job_id: str) -> str:
    """A DNS-1123 name (lower case, `-`, at most 63 characters) for a planned job id."""
    return f"agentrun-{runner_job_id.lower().replace('_', '-')}"[:63].rstrip("-")


def job_manifest(request: LaunchRequest, *, name: str, namespace: str) -> dict[str, Any]:
    """The batch/v1 Job: one pod, never restarted (the dispatcher owns retries)."""
    profile = request.profile
    labels = {
        "app.kubernetes.io/name": "agentrun-runner",
        "agentrun/run-id": request.run_id,
        "agentrun/runner-job-id": request.runner_job_id,
    }
    env = [
        {"name": "AGENTRUN_API_URL", "value": request.api_url},
        {"name": "AGENTRUN_RUN_ID", "value": request.run_id},
        {"name": "AGENTRUN_COMMAND_ID", "value": request.command_id},
        {"name": "AGENTRUN_RUNNER_ID", "value": request.runner_id},
        {"name": "AGENTRUN_RUNNER_JOB_ID", "value": request.runner_job_id},
        {
            "name": "AGENTRUN_RUNNER_KEY",
            "valueFrom": {"secretKeyRef": {"name": name, "key": KEY_FIELD}},
        },
    ]
    container = {
        "name": "runner",
        "image": profile.get("image") or conf.runner_image(),
        # The runner alone (no Django, no database): the image needs only `pip install .`.
        "args": ["python", "-m", "runner", "run", "--run", request.run_id],
        "env": env,
    }
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if profile.get("service_account_name"):
        pod_spec["serviceAccountName"] = profile["service_account_name"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def secret_manifest(request: LaunchRequest, *, name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": {KEY_FIELD: request.runner_key},
    }


def load_clients() -> Clients:
    """(BatchV1Api, CoreV1Api, the client's error types), from in-cluster or kube config."""
    try:
        import urllib3.exceptions
        from kubernetes import client, config  # optional dependency
    except ImportError as error:
        raise LaunchError(
            "the kubernetes launcher needs the optional `kubernetes` package",
            reason="launcher-unavailable",
        ) from error
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as error:
            raise LaunchError(f"no Kubernetes configuration: {error}") from error
    errors = (client.exceptions.ApiException, urllib3.exceptions.HTTPError, OSError)
    return client.BatchV1Api(), client.CoreV1Api(), errors


class KubernetesLauncher:
    """`clients` defaults to the configured cluster (`load_clients`, on first use); a
    caller may hand in its own API objects."""

    name = "kubernetes"

    def __init__(self, clients: Clients | None = None) -> None:
        self._clients = clients

    def _apis(self) -> Clients:
        if self._clients is None:
            self._clients = load_clients()
        return self._clients

    def launch(self, request: LaunchRequest) -> Launched:
        """Create (or find) the Secret and the Job. Errors: `LaunchError`."""
        batch, core, errors = self._apis()
        name = job_name(request.runner_job_id)
        profile = request.profile
        namespace = profile.get("namespace") or conf.kubernetes_namespace()
        try:
            self._put_secret(core, errors, secret_manifest(request, name=name, namespace=namespace))
            outcome = self._create_job(
                batch, errors, job_manifest(request, name=name, namespace=namespace)
            )
        except errors as error:
            raise LaunchError(f"kubernetes: {error}", job_name=name) from error
        image = profile.get("image") or conf.runner_image()
        return Launched(
            launcher=self.name,
            job_name=name,
            namespace=namespace,
            image=image,
            manager_url=request.api_url,
            runner_id=request.runner_id,
            source_commit=conf.source_commit(),
            outcome=outcome,
            details={"service_account_name": profile.get("service_account_name")},
        )

    @staticmethod
    def _put_secret(core: Any, errors: tuple[type[BaseException], ...], body: Any) -> None:
        meta = body["metadata"]
        try:
            core.create_namespaced_secret(meta["namespace"], body)
        except errors as error:
            if getattr(error, "status", None) != 409:
                raise
            core.replace_namespaced_secret(meta["name"], meta["namespace"], body)

    @staticmethod
    def _create_job(batch: Any, errors: tuple[type[BaseException], ...], body: Any) -> str:
        try:
            batch.create_namespaced_job(body["metadata"]["namespace"], body)
        except errors as error:
            if getattr(error, "status", None) != 409:
                raise
            return "existing"  # idempotent by name: an earlier attempt created it
        return "launched"

    def abort(self, launched: Launched) -> None:
        batch, _, errors = self._apis()
        try:
            batch.delete_namespaced_job(
                launched.job_name, launched.namespace, propagation_policy="Background"
            )
        except errors as error:
            if getattr(error, "status", None) != 404:
                raise LaunchError(f"kubernetes: {error}") from error

    def observe(self, job: RunnerJob) -> str:
        batch, _, errors = self._apis()
        try:
            status = batch.read_namespaced_job_status(job.job_name, job.namespace).status
        except errors as error:
            return JobState.MISSING if getattr(error, "status", None) == 404 else JobState.UNKNOWN
        if getattr(status, "active", None):
            return JobState.ACTIVE
        if getattr(status, "succeeded", None):
            return JobState.SUCCEEDED
        if getattr(status, "failed", None):
            return JobState.FAILED
        return JobState.ACTIVE  # created, pod not scheduled yet
