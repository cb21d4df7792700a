"""Cell 14: Server-Sent Events streams on one instance (issue 19's "Load" figures).

One uvicorn process started as production runs it (cell 11's `uvicorn()`), its default
pool. N clients (1,000 in the full run, 200 with --quick) each hold `GET
/runs/{id}/stream` open on their own run; once all are open (the `agentrun_streams_open`
gauge), /healthz is probed on fresh connections and the server's PostgreSQL sessions are
counted; then one event is appended to every run (the append service, 8 threads) and each
client stamps the moment its event arrives. Latency = arrival - the start of its append.

Reference ("self"): the same N clients long-polling `GET /runs/{id}/events?wait=30` on the
same server, same appends. The figure is the ratio of append -> delivery p50 (and p99 in
the notes), stream / long-poll; held connections and /healthz p99 are noted for both.
"""

from __future__ import annotations

import asyncio
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentrun.auth import issue_api_key
from bench import fixtures
from bench.cells.server_load import (
    probe_healthz,
    raise_file_limit,
    request,
    server_sessions,
    uvicorn,
    waiting_now,
)
from bench.harness import CellReport, Figure, Ledger, Sample, Scale, compare, percentile
from runs.services.event_log import NewEvent, append_runner_events


async def streams_open(port: int) -> int:
    _, body = await request(port, "/metrics")
    match = re.search(rb"^agentrun_streams_open (\S+)$", body, re.MULTILINE)
    return int(float(match.group(1))) if match else 0


async def one_stream(
    port: int, run_id: str, secret: str, after: int, arrived: dict[str, float]
) -> None:
    """Hold a stream open until the event after `after` arrives; stamp its arrival."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [
        f"GET /api/v1/runs/{run_id}/stream?after_seq={after} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: Bearer {secret}",
        "Accept: text/event-stream",
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    try:
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"id: "):
                arrived[run_id] = time.perf_counter()
                return
    finally:
        writer.close()


async def one_poll(
    port: int, run_id: str, secret: str, after: int, arrived: dict[str, float]
) -> None:
    status, body = await request(
        port,
        f"/api/v1/runs/{run_id}/events?after_seq={after}&wait=30",
        {"Authorization": f"Bearer {secret}"},
    )
    if status == 200 and b'"count":1' in body:
        arrived[run_id] = time.perf_counter()


def append_all(runs: list[fixtures.ClaimedRun]) -> dict[str, float]:
    """One event per run; the moment each append began."""
    started: dict[str, float] = {}

    def append(run: fixtures.ClaimedRun) -> None:
        try:
            started[run.run_id] = time.perf_counter()
            append_runner_events(
                run_id=run.run_id,
                runner_id=run.runner_id,
                lease_epoch=run.lease_epoch,
                events=[NewEvent("log", {"bench": "stream"})],
            )
        finally:
            fixtures.close_django_connection()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(append, runs))
    return started


def last_seqs(run_ids: list[str]) -> dict[str, int]:
    from django.db.models import Max

    from runs.models import Event

    rows = Event.objects.filter(run_id__in=run_ids).values("run_id").annotate(last=Max("seq"))
    try:
        return {row["run_id"]: row["last"] for row in rows}
    finally:
        fixtures.close_django_connection()


async def phase(kind: str, port: int, runs: list[fixtures.ClaimedRun], secret: str) -> Sample:
    arrived: dict[str, float] = {}
    after = await asyncio.to_thread(last_seqs, [run.run_id for run in runs])
    client = one_stream if kind == "stream" else one_poll
    gauge = streams_open if kind == "stream" else waiting_now
    tasks = []
    for start in range(0, len(runs), 100):  # clients arrive in batches, not in one instant
        for run in runs[start : start + 100]:
            tasks.append(
                asyncio.ensure_future(client(port, run.run_id, secret, after[run.run_id], arrived))
            )
        deadline = time.monotonic() + 60
        while await gauge(port) < len(tasks) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
    sessions = server_sessions()
    healthz = await probe_healthz(port, 50, 0.02)
    began = time.perf_counter()
    started = await asyncio.get_running_loop().run_in_executor(None, append_all, runs)
    await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=60)
    elapsed = time.perf_counter() - began
    latencies = [(arrived[r] - started[r]) * 1000 for r in arrived if r in started]
    ledger = Ledger(expected=len(runs), seen=len(latencies), lost=len(runs) - len(latencies))
    extra = {
        "clients": len(runs),
        "server_sessions": sum(sessions.values()),
        "healthz_p99_ms": percentile(healthz, 99),
        "delivery_p99_ms": percentile(latencies, 99),
    }
    return Sample(len(latencies), elapsed, ledger, latencies, extra)


def run(scale: Scale) -> CellReport:
    report = CellReport()
    clients = scale.pick(200, 1000)
    files = raise_file_limit()
    runs = fixtures.claimed_runs(clients, with_session=False)
    secret = issue_api_key(tenant_id=fixtures.BENCH_TENANT, role="client").secret
    with uvicorn() as (port, _process):

        def side(kind: str) -> Any:
            return lambda: asyncio.run(phase(kind, port, runs, secret))

        figure = Figure(
            "14.delivery_p50",
            f"append -> delivery p50, {clients} concurrent clients on one instance",
            "stream",
            side("stream"),
            "long-poll",
            side("long-poll"),
            params={"clients": clients, "open_files": files},
            metric="p50",
            unit="ms",
            reference_kind="self",
        )
        outcome = compare(figure, repetitions=scale.pick(1, 3))
    report.outcomes.append(outcome)
    for name, samples in (("stream", outcome.a), ("long-poll", outcome.b)):
        for sample in samples:
            report.note(
                f"{name}: delivery p99 {sample.extra['delivery_p99_ms']:.1f} ms, "
                f"server PostgreSQL sessions while {clients} wait "
                f"{sample.extra['server_sessions']}, "
                f"/healthz p99 meanwhile {sample.extra['healthz_p99_ms']:.1f} ms, "
                f"{sample.ledger.summary()}"
            )
    return report
