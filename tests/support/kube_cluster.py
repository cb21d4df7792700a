"""A real Kubernetes API server for the test suite: etcd + kube-apiserver + the controller
manager (Jobs, garbage collection, TTL after finished), on free loopback ports.

Why not a fake: what the launcher relies on (409 on a second create, owner references and
the garbage collector deleting a Secret with its Job, the Job controller's status, TTL
cleanup, RBAC, server-side dry-run of the manifests) is the API server's behaviour, not
ours. No registry ships a ready kube-apiserver; `.ci/build-kubernetes` builds 1.20.2 once
per machine from Debian's source package into AGENTRUN_KUBE_CACHE (default
/var/cache/agentrun/kubernetes-1.20.2/bin), and etcd is Debian's `etcd-server`.

There is no kubelet: pods are created by the Job controller and stay Pending. `PodStandIn`
plays the node: it marks a Job's pods Succeeded or Failed, which is all the launcher can
observe of a pod anyway. The ServiceAccount admission plugin is off (no token controller
runs, and runner pods mount no token). Authentication is static tokens: an admin in
`system:masters`, and the deploy manifests' launcher service account (`LAUNCHER_ACCOUNT`);
authorization is RBAC, so the manifests' Role is all the launcher gets as that account.

Use it from a conftest.py: `from tests.support.kube_cluster import kube_cluster`.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HOST = "127.0.0.1"
# The account deploy/kubernetes/10-rbac.yaml gives the workers (who launch runner Jobs).
LAUNCHER_ACCOUNT = "system:serviceaccount:agentrun:agentrun-launcher"
CACHE = Path(os.environ.get("AGENTRUN_KUBE_CACHE", "/var/cache/agentrun/kubernetes-1.20.2"))
FEATURE_GATES = "TTLAfterFinished=true"  # alpha in 1.20: both servers need it
HOW_TO_BUILD = (
    "the Kubernetes tests need kube-apiserver and kube-controller-manager 1.20.2 in "
    f"{CACHE / 'bin'} and etcd on PATH: run `.ci/build-kubernetes` once (as root; about 11 "
    "minutes and 1.4 GB of memory on two cores; `.ci/run` does it when they are missing)"
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


class KubeCluster:
    """etcd, kube-apiserver and kube-controller-manager as child processes."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.token = secrets.token_hex(16)
        self.launcher_token = secrets.token_hex(16)
        self.port = _free_port()
        self.kubeconfig = workdir / "kubeconfig"
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._etcd_dir: Path | None = None
        atexit.register(self.stop)

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.port}"

    def start(self) -> None:
        binaries = self._binaries()
        self._write_keys()
        etcd_port, peer_port = _free_port(), _free_port()
        data_dir = self._etcd_dir = Path(tempfile.mkdtemp(prefix="agentrun-etcd-", dir=_fast_dir()))
        self._spawn("etcd", [
            binaries["etcd"], "--name=default", f"--data-dir={data_dir}",
            f"--listen-client-urls=http://{HOST}:{etcd_port}",
            f"--advertise-client-urls=http://{HOST}:{etcd_port}",
            f"--listen-peer-urls=http://{HOST}:{peer_port}",
            f"--initial-advertise-peer-urls=http://{HOST}:{peer_port}",
            f"--initial-cluster=default=http://{HOST}:{peer_port}",
        ])  # fmt: skip
        work = self.workdir
        self._spawn("kube-apiserver", [
            binaries["kube-apiserver"], f"--etcd-servers=http://{HOST}:{etcd_port}",
            f"--bind-address={HOST}", f"--advertise-address={HOST}",
            f"--secure-port={self.port}", f"--cert-dir={work / 'certs'}",
            f"--tls-cert-file={work / 'server.crt'}",
            f"--tls-private-key-file={work / 'server.key'}",
            f"--token-auth-file={work / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={work / 'sa.key'}",
            f"--service-account-signing-key-file={work / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--disable-admission-plugins=ServiceAccount",
            f"--feature-gates={FEATURE_GATES}",
        ])  # fmt: skip
        self._write_kubeconfig()
        wait_until(self._ready, timeout=120, what="kube-apiserver /readyz")
        self._spawn("kube-controller-manager", [
            binaries["kube-controller-manager"], f"--kubeconfig={self.kubeconfig}",
            "--controllers=job,garbagecollector,ttl-after-finished,namespace",
            "--leader-elect=false", "--port=0", "--secure-port=0",
            f"--feature-gates={FEATURE_GATES}",
        ])  # fmt: skip
        wait_until(
            lambda: self.kubectl("get", "namespace", "default", check=False).returncode == 0,
            timeout=60,
            what="the default namespace",
        )

    def stop(self) -> None:
        """SIGKILL: the cluster is thrown away (a graceful API server stop waits ~13 s for
        its watches), then its etcd data goes."""
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self._procs.clear()
        if self._etcd_dir is not None:
            shutil.rmtree(self._etcd_dir, ignore_errors=True)
            self._etcd_dir = None

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`kubectl` against this server (the machine's /usr/bin/kubectl)."""
        done = subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done

    def clients(
        self, *, as_launcher: bool = False
    ) -> tuple[Any, Any, tuple[type[BaseException], ...]]:
        """(BatchV1Api, CoreV1Api, error types): the launcher's `clients`, on this server,
        as the admin or (`as_launcher`) as the manifests' launcher service account."""
        import urllib3.exceptions
        from kubernetes import client, config

        path = self.kubeconfig
        if as_launcher:
            path = self.workdir / "kubeconfig-launcher"
            self._write_kubeconfig(path, self.launcher_token)
        api = config.new_client_from_config(config_file=str(path))
        errors = (client.exceptions.ApiException, urllib3.exceptions.HTTPError, OSError)
        return client.BatchV1Api(api), client.CoreV1Api(api), errors

    def create_namespace(self, prefix: str) -> str:
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.kubectl("create", "namespace", name)
        return name

    def log_tail(self, name: str, lines: int = 30) -> str:
        text = (self.workdir / f"{name}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _binaries(self) -> dict[str, str]:
        found = {
            "etcd": shutil.which("etcd") or "",
            "kube-apiserver": str(CACHE / "bin" / "kube-apiserver"),
            "kube-controller-manager": str(CACHE / "bin" / "kube-controller-manager"),
        }
        missing = [name for name, path in found.items() if not path or not os.access(path, os.X_OK)]
        if missing or not shutil.which("kubectl"):
            pytest.fail(f"{', '.join(missing) or 'kubectl'} not found: {HOW_TO_BUILD}")
        return found

    def _write_keys(self) -> None:
        work = self.workdir
        for args in (
            ["genrsa", "-out", str(work / "sa.key"), "2048"],
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-keyout", str(work / "server.key"), "-out", str(work / "server.crt"),
                "-subj", "/CN=agentrun-test-apiserver",
                "-addext", f"subjectAltName=IP:{HOST},DNS:localhost",
            ],
        ):  # fmt: skip
            subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
        (work / "tokens.csv").write_text(
            f'{self.token},agentrun-test,1,"system:masters"\n'
            f'{self.launcher_token},{LAUNCHER_ACCOUNT},2,"system:serviceaccounts"\n'
        )

    def _write_kubeconfig(self, path: Path | None = None, token: str | None = None) -> None:
        (path or self.kubeconfig).write_text(
            "apiVersion: v1\nkind: Config\n"
            "clusters:\n- name: test\n  cluster:\n"
            f"    server: {self.server}\n"
            f"    certificate-authority: {self.workdir / 'server.crt'}\n"
            f"users:\n- name: test\n  user:\n    token: {token or self.token}\n"
            "contexts:\n- name: test\n  context: {cluster: test, user: test}\n"
            "current-context: test\n"
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        with (self.workdir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self._procs.append((name, proc))

    def _ready(self) -> bool:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.log_tail(name)}")
        done = self.kubectl("get", "--raw", "/readyz", check=False)
        return done.returncode == 0 and done.stdout.strip() == "ok"


def _fast_dir() -> str | None:
    """etcd fsyncs every write: in memory when the machine has /dev/shm."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


class PodStandIn:
    """Plays the missing kubelet: marks the pods the Job controller made for a Job."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def finish(self, namespace: str, job_name: str, phase: str) -> None:
        """Wait for the Job's pod, then set its phase (`Succeeded` or `Failed`)."""
        pods = wait_until(
            lambda: self.core.list_namespaced_pod(
                namespace, label_selector=f"job-name={job_name}"
            ).items,
            timeout=60,
            what=f"the pod of job {job_name}",
        )
        for pod in pods:
            self.core.patch_namespaced_pod_status(
                pod.metadata.name, namespace, {"status": {"phase": phase}}
            )


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A started API server shared by the session; stopped when the session ends."""
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"))
    started = time.monotonic()
    try:
        cluster.start()
        print(f"\nkube-apiserver ready in {time.monotonic() - started:.1f}s on {cluster.server}")
        yield cluster
    finally:
        cluster.stop()
