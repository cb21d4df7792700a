"""Cell 2: the event append over HTTP against the same append at the service level.

agentrun: `POST /api/v1/runs/{id}/events` served by gunicorn (`-k gthread`, 1 worker x 8
threads = 8 request threads and 8 database connections), driven by a load generator on
loopback: 8 client threads in the bench process, each with its own keep-alive connection
and its own run's runner key (writer w -> run w % 8), closed loop (next request when the
answer arrives). One process, as deployed (`up` and the Kubernetes API pod run one server
process) and as the reference runs (one process, 8 threads). Until issue 18's fourth round
the cell ran 2 workers x 4 threads; on the same tree, interleaved on a loaded machine, that
layout gave lower ratios (batch 1: 0.20 and 0.32 against 0.27 and 0.38; batch 100: 0.29 and
0.37 against 0.52 and 0.73) and used more CPU per request.

Reference (a limit): the service call itself, `append_runner_events`, from 8 threads with
8 connections (cell 1's agentrun side). The ratio is what HTTP, auth, the tenant-scoped
run lookup, DRF parsing/validation and serialization cost on top of the service.
Latencies are per request (client side) and per call; p50/p99 are printed for both.

The server pools its database connections (`AGENTRUN_DB_POOL_ENABLED=1`), as the deployed
ASGI server does (agentrun/asgi.py): unpooled, Django closed the connection at every
request's end (`conn_max_age=0`), and each append paid a new PostgreSQL backend, which the
deployed server never does. Until issue 18's rerun the cell measured that connect.
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentrun.auth import issue_api_key
from bench import fixtures
from bench.cells.event_append import RUNS, event_ledger, payload, sample
from bench.harness import CellReport, Figure, Sample, Scale, compare
from bench.profiling import print_summary, profiled
from bench.servers import Gunicorn, gunicorn
from bench.worker_threads import WorkerResult, run_workers

WORKERS, THREADS, CLIENTS = 1, 8, 8


def http_sample(server: Gunicorn, *, batch: int, seconds: float) -> Callable[[], Sample]:
    def run() -> Sample:
        runs = fixtures.claimed_runs(RUNS)
        keys = [
            issue_api_key(tenant_id=fixtures.BENCH_TENANT, role="runner", run_id=r.run_id).secret
            for r in runs
        ]

        def prepare(index: int) -> Any:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            conn.connect()
            return conn, index, runs[index % RUNS], keys[index % RUNS]

        def step(state: Any, op: int, result: WorkerResult) -> None:
            conn, writer, run, key = state
            body: dict[str, Any] = {"runner_id": run.runner_id, "lease_epoch": run.lease_epoch}
            items = [{"type": "log", "payload": payload(writer, op, k)} for k in range(batch)]
            if batch == 1:
                body.update(items[0])
            else:
                body["events"] = items
            started = _now()
            conn.request(
                "POST",
                f"/api/v1/runs/{run.run_id}/events",
                body=json.dumps(body),
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
            response = conn.getresponse()
            answer = response.read()
            if response.status != 201:
                raise RuntimeError(f"HTTP {response.status}: {answer[:300]!r}")
            result.latencies_ms.append((_now() - started) * 1000)
            result.done += batch
            result.acknowledged.append(op)

        results, elapsed = run_workers(
            CLIENTS, prepare, step, seconds=seconds, finish=lambda state: state[0].close()
        )
        ledger = event_ledger(runs, results, batch)
        latencies = [x for r in results for x in r.latencies_ms]
        return Sample(sum(r.done for r in results), elapsed, ledger, latencies)

    return run


@contextmanager
def pooled_server() -> Iterator[None]:
    """The server processes started in the block pool their connections (module doc)."""
    before = os.environ.get("AGENTRUN_DB_POOL_ENABLED")
    os.environ["AGENTRUN_DB_POOL_ENABLED"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("AGENTRUN_DB_POOL_ENABLED")
        else:
            os.environ["AGENTRUN_DB_POOL_ENABLED"] = before


def _now() -> float:
    import time

    return time.perf_counter()


def run(scale: Scale) -> CellReport:
    report = CellReport()
    seconds = scale.pick(0.8, 4.0)
    params = {
        "gunicorn": f"{WORKERS}x{THREADS} gthread, pooled",
        "clients": CLIENTS,
        "runs": RUNS,
    }
    with pooled_server(), gunicorn(workers=WORKERS, threads=THREADS) as server:
        for batch in (1, 100):
            figure = Figure(
                f"2.http.batch{batch}",
                f"append over HTTP (batch {batch}) against the service level",
                "http",
                http_sample(server, batch=batch, seconds=seconds),
                "service",
                sample("service", writers=CLIENTS, batch=batch, seconds=seconds),
                params={**params, "batch": batch},
                unit="events/s",
                reference_kind="limit",
                goal=(">=", 0.7) if batch == 1 else None,  # issue 18
            )
            report.outcomes.append(compare(figure))
        if scale.profile:
            report.data["profile"] = profile_worker(server, scale)
    return report


def profile_worker(server: Gunicorn, scale: Scale) -> dict[str, Any]:
    """py-spy one gunicorn worker while the load generator runs single appends."""
    seconds = scale.pick(3, 8)
    pid = server.worker_pids()[0]
    with profiled("http-gunicorn-worker", seconds=seconds, focus="handle", pid=pid) as summary:
        http_sample(server, batch=1, seconds=seconds + 1)()
    print_summary(summary)
    return summary
