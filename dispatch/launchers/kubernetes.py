"""The `kubernetes` launcher: one batch/v1 Job per runner job, through the official client.

The `kubernetes` package is an optional dependency (not in requirements.txt): it is
imported when this launcher is first used, and a missing package is a launch error that
names it. The Job name comes from the intent's planned runner job id, so it is stable
across attempts and a launch is idempotent by name: a 409 on create means an earlier
attempt already created it, which is recorded as outcome `existing`. The run-scoped
runner key goes into a Secret of the same name, referenced from the pod's environment,
so it never appears in the Job spec. The Job is created first and the Secret second, with
an owner reference to the Job's uid: the garbage collector deletes the Secret with its Job
(abort, `ttlSecondsAfterFinished`, an operator's `kubectl delete job`), so no runner key
outlives its Job (issue 23: 202 Secrets were left after 200 launches). A launch that dies
between the two leaves a Job whose pod waits for its Secret; the next attempt finds the Job
(`existing`) and writes the Secret. Abort deletes both at once rather than waiting for the
collector.

Image, namespace, service account, `resources` (requests and limits) and
`ttl_seconds_after_finished` come from the operator's launch profile
(`LaunchRequest.profile`), never from a client. The container runs `python -m runner run
--run ID`, which loads no Django, so a runner pod needs no database and no server
settings. Its environment is the runner's ids, the API URL and the key, nothing else: no
service links (Kubernetes would add every Service's host and port), and no Kubernetes API
token mounted, even under the profile's service account.
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
    if profile.get("resources"):
        container["resources"] = profile["resources"]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "enableServiceLinks": False,
        # The runner talks to agentrun's API only, never to Kubernetes': no token, whatever
        # the service account may grant.
        "automountServiceAccountToken": False,
    }
    if profile.get("service_account_name"):
        pod_spec["serviceAccountName"] = profile["service_account_name"]
    ttl = profile.get("ttl_seconds_after_finished", conf.kubernetes_job_ttl_s())
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": int(ttl),
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def secret_manifest(
    request: LaunchRequest, *, name: str, namespace: str, job_uid: str
) -> dict[str, Any]:
    """The runner key's Secret, owned by the Job (`job_uid`): deleted with it."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
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
            outcome, uid = self._create_job(
                batch, errors, job_manifest(request, name=name, namespace=namespace)
            )
            secret = secret_manifest(request, name=name, namespace=namespace, job_uid=uid)
            self._put_secret(core, errors, secret)
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
    def _create_job(
        batch: Any, errors: tuple[type[BaseException], ...], body: Any
    ) -> tuple[str, str]:
        """("launched" | "existing", the Job's uid)."""
        meta = body["metadata"]
        try:
            created = batch.create_namespaced_job(meta["namespace"], body)
        except errors as error:
            if getattr(error, "status", None) != 409:
                raise
            # Idempotent by name: an earlier attempt created it.
            found = batch.read_namespaced_job(meta["name"], meta["namespace"])
            return "existing", str(found.metadata.uid)
        return "launched", str(created.metadata.uid)

    def abort(self, launched: Launched) -> None:
        """Delete the Job (its pods go in the background) and its Secret, now."""
        batch, core, errors = self._apis()
        name, namespace = launched.job_name, launched.namespace
        try:
            batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except errors as error:
            if getattr(error, "status", None) != 404:
                raise LaunchError(f"kubernetes: {error}") from error
        try:
            core.delete_namespaced_secret(name, namespace)
        except errors as error:
            # 404: the collector was first. Otherwise it deletes the Secret with its Job.
            if getattr(error, "status", None) != 404:
                raise LaunchError(f"kubernetes: {error}") from error

    def observe(self, job: RunnerJob) -> str:
        batch, _, errors = self._apis()
        try:
            status = batch.read_namespaced_job_status(job.job_name, job.namespace).status
        except errors as error:
            return JobState.MISSING if getattr(error, "status", None) == 404 else JobState.UNKNOWN
        finished = {
            condition.type
            for condition in getattr(status, "conditions", None) or []
            if condition.status == "True"
        }
        if "Failed" in finished:
            return JobState.FAILED
        if "Complete" in finished:
            return JobState.SUCCEEDED
        if getattr(status, "active", None):
            return JobState.ACTIVE
        if getattr(status, "succeeded", None):
            return JobState.SUCCEEDED
        if getattr(status, "failed", None):
            return JobState.FAILED
        return JobState.ACTIVE  # created, pod not scheduled yet
