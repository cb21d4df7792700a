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

The floor of the HTTP stack (issue 18: is the gap agentrun's, or any Django/DRF
endpoint's?): the same gunicorn (`bench.http_wsgi`, agentrun's settings with the bench's
URLconf, `bench.http_settings`) also serves three references that the same clients send
the same requests to (same body, same runner key header), interleaved with the two sides
above in every repetition (`bench.http_floor` says exactly what each does):
- drf-floor: agentrun's `RunViewSet` with the service call replaced by a fixed answer of
  the real one's shape and size: the same middleware, authentication, path check, parser,
  serializer and renderer as the real append, and no database statement;
- django: a plain Django view on the same middleware (no DRF, no auth), echoing the body;
- wsgi: a bare WSGI callable in the same worker (no Django), echoing the body.

The model (printed as notes): a single append costs the gunicorn worker the HTTP stack's
CPU plus the service's, on one process whose Python runs one thread at a time (the GIL),
while PostgreSQL and the load generator use the other core. If both parts are CPU-bound
in that one process, the time per event adds up: t(http) = t(stack) + t(service), so the
HTTP endpoint's ceiling is 1 / (1/floor + 1/service), in events/s, with `floor` the
drf-floor side's rate and `service` the reference's, measured in the same repetition. The
best ratio any Django/DRF endpoint paying this stack could reach against the service is
then ceiling/service = floor / (floor + service); agentrun/ceiling says how much of the
gap is left beyond that (the service run inside the server: its key check in the lock
statement, the pooled connection's checkout, the GIL shared with the stack); above 1 where
the stack of one request runs while another waits on PostgreSQL. The same model in CPU:
service/(drf-floor + service), from the worker's CPU per request and the service's CPU per
call, and the stack's CPU budget for a ratio of 0.7 (service x (1/0.7 - 1)). The model is
approximate on two shared cores (the stack's and the service's waits overlap; the client's
CPU competes with both), so each side's CPU is also measured: the gunicorn worker's CPU
per request (its process times around the sample) and, for the service, the bench
process's CPU per call; the notes split the server's CPU into gunicorn (wsgi), Django and
agentrun's middleware (django - wsgi), DRF with the auth, parse, validation and render
(drf-floor - django), and the append (agentrun - drf-floor).

The server pools its database connections (`AGENTRUN_DB_POOL_ENABLED=1`), as the deployed
ASGI server does (agentrun/asgi.py): unpooled, Django closed the connection at every
request's end (`conn_max_age=0`), and each append paid a new PostgreSQL backend, which the
deployed server never does. Until issue 18's rerun the cell measured that connect.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentrun.auth import issue_api_key
from bench import fixtures
from bench.cells.event_append import RUNS, event_ledger, payload, service_side
from bench.harness import CellReport, Figure, Ledger, Outcome, Sample, Scale, compare_many
from bench.profiling import print_summary, profiled
from bench.servers import Gunicorn, gunicorn
from bench.worker_threads import WorkerResult, run_workers

WORKERS, THREADS, CLIENTS = 1, 8, 8
APP = "bench.http_wsgi:application"

# Where each HTTP side sends a run's append (bench/http_urls.py, bench/http_wsgi.py).
TARGETS: dict[str, str] = {
    "http": "/api/v1/runs/{run_id}/events",
    "drf-floor": "/api/v1/bench/floor/runs/{run_id}/events",
    "django": "/api/v1/bench/django/runs/{run_id}/events",
    "wsgi": "/bare/runs/{run_id}/events",
}


def http_sample(
    server: Gunicorn, *, batch: int, seconds: float, side: str = "http"
) -> Callable[[], Sample]:
    target = TARGETS[side]

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
                target.format(run_id=run.run_id),
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

        with _cpu_meter(server.worker_pids()) as cpu:
            results, elapsed = run_workers(
                CLIENTS, prepare, step, seconds=seconds, finish=lambda state: state[0].close()
            )
        requests = sum(len(r.acknowledged) for r in results)
        if side == "http":
            ledger = event_ledger(runs, results, batch)
        else:  # a reference writes nothing: every request answered 201 is its whole ledger
            ledger = Ledger(expected=requests, seen=requests, notes=["reference: no writes"])
        latencies = [x for r in results for x in r.latencies_ms]
        extra = {
            "server_cpu_ms_per_request": round(cpu["server"] * 1000 / max(requests, 1), 4),
            "client_cpu_ms_per_request": round(cpu["self"] * 1000 / max(requests, 1), 4),
        }
        return Sample(sum(r.done for r in results), elapsed, ledger, latencies, extra)

    return run


def service_sample(*, batch: int, seconds: float) -> Callable[[], Sample]:
    """Cell 1's service side (8 threads, 8 connections), with its CPU per call measured."""

    def run() -> Sample:
        runs = fixtures.claimed_runs(RUNS)
        prepare, step = service_side(runs, batch)
        with _cpu_meter([]) as cpu:
            results, elapsed = run_workers(
                CLIENTS,
                prepare,
                step,
                seconds=seconds,
                finish=lambda _state: fixtures.close_django_connection(),
            )
        calls = sum(len(r.acknowledged) for r in results)
        ledger = event_ledger(runs, results, batch)
        latencies = [x for r in results for x in r.latencies_ms]
        extra = {"cpu_ms_per_call": round(cpu["self"] * 1000 / max(calls, 1), 4)}
        return Sample(sum(r.done for r in results), elapsed, ledger, latencies, extra)

    return run


@contextmanager
def _cpu_meter(pids: list[int]) -> Iterator[dict[str, float]]:
    """CPU seconds (user + system) used in the block by this process (`self`) and by the
    processes `pids` together (`server`)."""
    import psutil

    processes = [psutil.Process(pid) for pid in pids]

    def server_cpu() -> float:
        return sum(sum(p.cpu_times()[:2]) for p in processes)

    used: dict[str, float] = {}
    own, server = time.process_time(), server_cpu()
    yield used
    used["self"] = time.process_time() - own
    used["server"] = server_cpu() - server


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
    return time.perf_counter()


def run(scale: Scale) -> CellReport:
    report = CellReport()
    seconds = scale.pick(0.8, 4.0)
    params = {
        "gunicorn": f"{WORKERS}x{THREADS} gthread, pooled",
        "clients": CLIENTS,
        "runs": RUNS,
    }
    with pooled_server(), gunicorn(workers=WORKERS, threads=THREADS, app=APP) as server:
        for batch in (1, 100):
            outcomes = compare_many(figures(server, batch, seconds, {**params, "batch": batch}))
            report.outcomes.extend(outcomes)
            report.data[f"floor.batch{batch}"] = floor_model(outcomes, report, batch)
        if scale.profile:
            report.data["profile"] = profile_worker(server, scale)
    return report


def figures(server: Gunicorn, batch: int, seconds: float, params: dict[str, Any]) -> list[Figure]:
    """agentrun over HTTP against the service (the goal), then against each reference of the
    HTTP stack; one agentrun sample per repetition, all sides interleaved (`compare_many`)."""
    agentrun = http_sample(server, batch=batch, seconds=seconds)
    out = [
        Figure(
            f"2.http.batch{batch}",
            f"append over HTTP (batch {batch}) against the service level",
            "http",
            agentrun,
            "service",
            service_sample(batch=batch, seconds=seconds),
            params=params,
            unit="events/s",
            reference_kind="limit",
            goal=(">=", 0.7) if batch == 1 else None,  # issue 18
        )
    ]
    for side in ("drf-floor", "django", "wsgi"):
        out.append(
            Figure(
                f"2.{side}.batch{batch}",
                f"append over HTTP (batch {batch}) against the {side} reference (no service)",
                "http",
                agentrun,
                side,
                http_sample(server, batch=batch, seconds=seconds, side=side),
                params=params,
                unit="events/s",
                reference_kind="limit",
            )
        )
    return out


def floor_model(outcomes: list[Outcome], report: CellReport, batch: int) -> dict[str, Any]:
    """The notes of the module docstring's model, per repetition, as medians."""
    if any(o.error for o in outcomes):
        return {"error": "a side failed"}
    by_side = {o.figure.b_name: o.b for o in outcomes}
    http, service, floor = outcomes[0].a, by_side["service"], by_side["drf-floor"]
    ceilings = [1 / (1 / f.rate + 1 / s.rate) for f, s in zip(floor, service, strict=True)]
    model: dict[str, Any] = {
        "floor_over_service": _median(f.rate / s.rate for f, s in zip(floor, service, strict=True)),
        "ceiling_events_s": _median(ceilings),
        "ceiling_over_service": _median(c / s.rate for c, s in zip(ceilings, service, strict=True)),
        "http_over_ceiling": _median(h.rate / c for h, c in zip(http, ceilings, strict=True)),
        "server_cpu_ms_per_request": {
            side: _median(s.extra["server_cpu_ms_per_request"] for s in samples)
            for side, samples in (
                ("http", http),
                *((k, by_side[k]) for k in TARGETS if k != "http"),
            )
        },
        "client_cpu_ms_per_request": {
            side: _median(s.extra["client_cpu_ms_per_request"] for s in samples)
            for side, samples in (
                ("http", http),
                *((k, by_side[k]) for k in TARGETS if k != "http"),
            )
        },
        "service_cpu_ms_per_call": _median(s.extra["cpu_ms_per_call"] for s in service),
    }
    cpu = model["server_cpu_ms_per_request"]
    service_cpu = model["service_cpu_ms_per_call"]
    # The same model in CPU: the worker spends the floor's CPU and the service's per append.
    model["cpu_ceiling_over_service"] = round(service_cpu / (cpu["drf-floor"] + service_cpu), 4)
    model["stack_cpu_budget_ms_for_0.7"] = round(service_cpu * (1 / 0.7 - 1), 4)
    report.note(
        f"2.batch{batch} floor: drf-floor/service {model['floor_over_service']:.2f}, "
        f"ceiling 1/(1/floor + 1/service) {model['ceiling_events_s']:,.0f} events/s = "
        f"{model['ceiling_over_service']:.2f} x service; http/ceiling "
        f"{model['http_over_ceiling']:.2f}"
    )
    report.note(
        f"2.batch{batch} server CPU per request (ms): wsgi {cpu['wsgi']:.3f}, django "
        f"{cpu['django']:.3f}, drf-floor {cpu['drf-floor']:.3f}, http {cpu['http']:.3f}; "
        f"service in process {model['service_cpu_ms_per_call']:.3f} per call. Split: gunicorn "
        f"{cpu['wsgi']:.3f}, Django + middleware {cpu['django'] - cpu['wsgi']:.3f}, DRF + auth "
        f"+ parse/validate/render {cpu['drf-floor'] - cpu['django']:.3f}, the append "
        f"{cpu['http'] - cpu['drf-floor']:.3f}"
    )
    report.note(
        f"2.batch{batch} CPU model: ceiling service/(drf-floor + service) "
        f"{model['cpu_ceiling_over_service']:.2f}; 0.7 needs the stack under "
        f"{model['stack_cpu_budget_ms_for_0.7']:.3f} ms of server CPU per request "
        f"(bare Django here: {cpu['django']:.3f}, bare WSGI: {cpu['wsgi']:.3f})"
    )
    return model


def _median(values: Any) -> float:
    return round(float(statistics.median(list(values))), 4)


def profile_worker(server: Gunicorn, scale: Scale) -> dict[str, Any]:
    """py-spy one gunicorn worker while the load generator runs single appends."""
    seconds = scale.pick(3, 8)
    pid = server.worker_pids()[0]
    with profiled("http-gunicorn-worker", seconds=seconds, focus="handle", pid=pid) as summary:
        http_sample(server, batch=1, seconds=seconds + 1)()
    print_summary(summary)
    return summary
