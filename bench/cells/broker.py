"""Cell 11: the embedded Celery broker, chosen by measurement (issue 15, item 3).

One real worker process (`--pool threads -c 4`) consumes `bench.broker_ping` from a
broker; this process publishes. Latency = the task's start in the worker - the publish.
- paced: 20 messages/s for a few seconds (the on-commit wake-ups of a busy control plane);
- burst: 8 threads publishing at once (the turn bursts that killed the filesystem worker).

A side is agentrun's default, the SQLAlchemy transport on the database (`agentrun.broker`,
100 ms polling); B is Redis on loopback (a service to run: the limit), C kombu's
filesystem transport (the old default). The ledger counts every message journaled by the
worker: one never started is lost, and a worker that died makes the sample invalid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import env
from bench.harness import CellReport, Figure, Ledger, Sample, Scale, compare_many

REDIS_URL = "redis://127.0.0.1:6379/12"
PING = "bench.broker_ping"
Publish = Callable[[Callable[[int], None], int], None]


def _brokers(folder: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    rest = env.database_url().partition("://")[2]
    fs: dict[str, Any] = {f"data_folder_{d}": str(folder / "fs") for d in ("in", "out")}
    fs["control_folder"] = str(folder / "control")  # kombu's default is ./control
    return {
        "agentrun-sqla": (f"agentrun-sqla+postgresql+psycopg://{rest}", {}),
        "redis": (REDIS_URL, {}),
        "filesystem": ("filesystem://", {**fs, "polling_interval": 0.1}),
    }


@contextmanager
def _worker(url: str, options: dict[str, Any], journal: Path) -> Iterator[subprocess.Popen[bytes]]:
    log_path = env.RESULTS / "broker-worker.log"
    worker_env = {**os.environ, "CELERY_BROKER_URL": url, "AGENTRUN_BENCH_JOURNAL": str(journal)}
    worker_env["AGENTRUN_BENCH_BROKER_OPTIONS"] = repr(options)
    argv = [sys.executable, "-m", "celery", "-A", "bench.broker_app", "worker", "-Q", "bench"]
    argv += ["--pool", "threads", "-c", "4", "--without-gossip", "--without-mingle", "-l", "INFO"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=env.ROOT, env=worker_env, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while " ready." not in log_path.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker worker did not start; see {log_path}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _sample(name: str, count: int, publish: Publish) -> Sample:
    from bench.broker_app import app, configure

    with tempfile.TemporaryDirectory() as folder:
        url, options = _brokers(Path(folder))[name]
        (Path(folder) / "fs").mkdir()
        journal = Path(folder) / "journal"
        configure(url, options)
        with _worker(url, options, journal) as worker:
            began = time.perf_counter()
            publish(lambda i: app.send_task(PING, (f"m{i}", time.time()), queue="bench"), count)
            seen = _wait_journal(journal, count, worker)
            seconds = time.perf_counter() - began
        latencies = [float(line.split()[1]) * 1000 for line in seen]
        ids = [line.split()[0] for line in seen]
        ledger = Ledger(expected=count, seen=len(set(ids)), duplicates=len(ids) - len(set(ids)))
        ledger.lost = count - ledger.seen
        if worker.returncode not in (None, -9):
            ledger.notes.append(f"worker died: exit {worker.returncode}")
            ledger.lost = max(ledger.lost, 1)
        return Sample(count, seconds, ledger, latencies, {"broker": name})


def _wait_journal(journal: Path, count: int, worker: subprocess.Popen[bytes]) -> list[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and worker.poll() is None:
        lines = journal.read_text().splitlines() if journal.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    return journal.read_text().splitlines() if journal.exists() else []


def _paced(rate: float) -> Publish:
    def publish(send: Callable[[int], None], count: int) -> None:
        began = time.perf_counter()
        for i in range(count):
            time.sleep(max(0.0, began + i / rate - time.perf_counter()))
            send(i)

    return publish


def _burst(send: Callable[[int], None], count: int) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(send, range(count)))


def run(scale: Scale) -> CellReport:
    report = CellReport()
    paced_n, burst_n = scale.pick(60, 200), scale.pick(200, 800)
    for key, title, count, publish in (
        ("11a", "broker pickup, paced 20/s", paced_n, _paced(20)),
        ("11b", "broker pickup, burst of 8 publishers", burst_n, _burst),
    ):
        ours = _side("agentrun-sqla", count, publish)
        figures = [
            Figure(
                key=f"{key}-{name}", title=f"{title} vs {name}", metric="p99", unit="ms",
                a_name="agentrun-sqla", a=ours, b_name=name, b=_side(name, count, publish),
                params={"messages": count, "worker": "1 process x 4 threads", "poll_ms": 100},
                reference_kind=kind, note=note,
            )
            for name, kind, note in (
                ("redis", "limit", "a service to run; the database broker is not"),
                ("filesystem", "peer", "the old default; its worker may die (invalid)"),
            )
        ]  # fmt: skip
        report.outcomes.extend(compare_many(figures, repetitions=scale.heavy_reps))
    return report


def _side(name: str, count: int, publish: Publish) -> Callable[[], Sample]:
    return lambda: _sample(name, count, publish)
