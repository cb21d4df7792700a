"""Cell 11: the API server under waiting clients (the Runtime issue's "Load" figures).

One uvicorn process started exactly as production runs it (`python -m ops.server`, which
execs `ops.server.server_argv`; run, not imported: nothing but the tests imports ops), on
the bench database, with its default pool (AGENTRUN_DB_POOL_SIZE). Each figure is read
against the issue's limit and printed as `value | limit | ratio value/limit | met`:

- 11.poll.healthz_p99: N concurrent long-polls (one per run, 1,000 in the full run) wait
  while /healthz is probed on fresh connections: its p99, limit 100 ms;
- 11.poll.connections: the server's PostgreSQL sessions meanwhile (its pool's and its
  listener's, by application_name), limit pool size + 1; its thread count is noted too;
- 11.poll.woken: one append per run; waiters answered 200 with their event, limit all;
- 11.one_run.errors: 200 waiters on one run, one append: non-200 answers, limit 0;
- 11.slow_headers.healthz_max: 32 clients send their headers a byte every 0.5 s while
  /healthz is probed: the slowest probe, limit 1,000 ms.

Nothing here is compared with a peer: the limits are the issue's.
"""

from __future__ import annotations

import asyncio
import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings

from agentrun.auth import issue_api_key
from bench import env, fixtures
from bench.harness import CellReport, Scale, percentile
from bench.servers import free_port
from runs.services.event_log import NewEvent, append_runner_events
from runs.waiting import APPLICATION_NAME as LISTENER_NAME

SERVER_NAME = "agentrun-bench-server"
SLOW_CLIENTS = 32


async def request(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET on its own connection (Connection: close); (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def probe_healthz(port: int, count: int, gap_s: float) -> list[float]:
    """`count` sequential /healthz requests; their latencies in ms (failures: inf)."""
    latencies = []
    for _ in range(count):
        began = time.perf_counter()
        try:
            status, _ = await asyncio.wait_for(request(port, "/healthz"), timeout=30)
            ok = status == 200
        except (OSError, TimeoutError):
            ok = False
        latencies.append((time.perf_counter() - began) * 1000 if ok else float("inf"))
        await asyncio.sleep(gap_s)
    return latencies


async def waiting_now(port: int) -> int:
    _, body = await request(port, "/metrics")
    match = re.search(rb"^agentrun_long_poll_waiters (\S+)$", body, re.MULTILINE)
    return int(float(match.group(1))) if match else 0


async def until_waiting(
    port: int, count: int, tasks: list[asyncio.Task[Any]], within_s: float = 60
) -> None:
    deadline = time.monotonic() + within_s
    while await waiting_now(port) < count:
        ended = [t for t in tasks if t.done()]
        if ended or time.monotonic() > deadline:
            first = ended[0].exception() or ended[0].result()[:2] if ended else None
            raise RuntimeError(
                f"fewer than {count} long-polls waiting; {len(ended)} ended, first: {first!r}"
            )
        await asyncio.sleep(0.2)


def server_sessions() -> dict[str, int]:
    with env.admin_connect() as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name IN (%s, %s) GROUP BY 1",
            [SERVER_NAME, LISTENER_NAME],
        ).fetchall()
    return {str(name): int(n) for name, n in rows}


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads")))


def raise_file_limit() -> int:
    """1,000 sockets each side: lift the soft limit to the hard one (the server inherits)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@contextmanager
def uvicorn() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    log = (env.RESULTS / "server_load.log").open("wb")
    child = {**os.environ, "DATABASE_URL": fixtures.raw_dsn()}
    child["AGENTRUN_DB_APPLICATION_NAME"] = SERVER_NAME
    child["AGENTRUN_DISPATCH_WAKE_ON_COMMIT"] = "false"
    command = [sys.executable, "-m", "ops.server", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, cwd=env.ROOT, env=child, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if asyncio.run(request(port, "/healthz"))[0] == 200:
                    break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start; see results/server_load.log")
            time.sleep(0.2)
        yield port, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=45)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def append_each(runs: list[fixtures.ClaimedRun], threads: int = 8) -> None:
    """One event per run, through the append service, from a few threads: every waiter's
    append lands well within its wait even on a loaded machine."""

    def append(run: fixtures.ClaimedRun) -> None:
        try:
            append_runner_events(
                run_id=run.run_id,
                runner_id=run.runner_id,
                lease_epoch=run.lease_epoch,
                events=[NewEvent("log", {"wake": True})],
            )
        finally:
            fixtures.close_django_connection()

    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(append, runs))


def woken(replies: list[Any]) -> tuple[int, int, int]:
    """(answered 200 with an event, timed out empty, errors) among the long-poll replies."""
    answered = [r for r in replies if not isinstance(r, BaseException) and r[0] == 200]
    good = sum(b'"count":1' in r[1] for r in answered)
    return good, len(answered) - good, len(replies) - len(answered)


async def many_polls(
    port: int, runs: list[fixtures.ClaimedRun], secret: str, batch: int = 100
) -> list[asyncio.Task[Any]]:
    """A long-poll per run, opened `batch` at a time (clients arrive, they do not all
    connect in one instant): each batch is waiting before the next one connects."""
    headers = {"Authorization": f"Bearer {secret}"}
    tasks: list[asyncio.Task[Any]] = []
    for start in range(0, len(runs), batch):
        for run in runs[start : start + batch]:
            path = f"/api/v1/runs/{run.run_id}/events?after_seq=1&wait=30"
            tasks.append(asyncio.ensure_future(request(port, path, headers)))
        await until_waiting(port, len(tasks), tasks)
    return tasks


async def polls_phase(
    port: int, pid: int, runs: list[fixtures.ClaimedRun], secret: str, probes: int
) -> dict[str, Any]:
    tasks = await many_polls(port, runs, secret)
    sessions = server_sessions()
    threads = threads_of(pid)
    latencies = await probe_healthz(port, probes, 0.02)
    sessions_after = server_sessions()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, append_each, runs)
    replies = await asyncio.gather(*tasks, return_exceptions=True)
    good, timed_out, errors = woken(replies)
    most = {
        name: max(sessions.get(name, 0), sessions_after.get(name, 0))
        for name in {*sessions, *sessions_after}
    }
    return {
        "waiters": len(runs),
        "healthz_p99_ms": percentile(latencies, 99),
        "healthz_p50_ms": percentile(latencies, 50),
        "server_sessions": most,
        "server_threads": threads,
        "woken": good,
        "timed_out": timed_out,
        "errors": errors,
    }


async def one_run_phase(port: int, run: fixtures.ClaimedRun, secret: str, count: int) -> int:
    tasks = await many_polls(port, [run] * count, secret)
    await asyncio.get_running_loop().run_in_executor(None, append_each, [run])
    replies = await asyncio.gather(*tasks, return_exceptions=True)
    _, timed_out, errors = woken(replies)
    return timed_out + errors


async def slow_client(port: int, stop: asyncio.Event) -> None:
    """Sends a request's headers one byte at a time, never finishing them."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 10_000
    try:
        for byte in header:
            if stop.is_set():
                break
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.5)
    except OSError:
        pass  # the server closed it: also fine
    finally:
        writer.close()


async def slow_headers_phase(port: int, probes: int) -> float:
    stop = asyncio.Event()
    clients = [asyncio.ensure_future(slow_client(port, stop)) for _ in range(SLOW_CLIENTS)]
    await asyncio.sleep(1.0)  # every slow client connected and trickling
    latencies = await probe_healthz(port, probes, 0.05)
    stop.set()
    await asyncio.gather(*clients, return_exceptions=True)
    return max(latencies)


def line(key: str, value: float, limit: float, unit: str, *, at_most: bool = True) -> str:
    met = value <= limit if at_most else value >= limit
    ratio = f"{value / limit:.2f}" if limit else "n/a (limit 0)"
    return (
        f"{key:<28} {value:,.2f} {unit} | limit {'<=' if at_most else '>='} {limit:,.0f} "
        f"{unit} | ratio {ratio} {'met' if met else 'MISSED'}"
    )


def run(scale: Scale) -> CellReport:
    report = CellReport()
    files = raise_file_limit()
    waiters = scale.pick(300, 1000)
    runs = fixtures.claimed_runs(waiters + 1, with_session=False)
    secret = issue_api_key(tenant_id=fixtures.BENCH_TENANT, role="client").secret
    fixtures.close_django_connection()
    pool = settings.AGENTRUN_DB_POOL_SIZE
    with uvicorn() as (port, process):
        polls = asyncio.run(
            polls_phase(port, process.pid, runs[:waiters], secret, scale.pick(100, 300))
        )
        errors = asyncio.run(one_run_phase(port, runs[-1], secret, 200))
        slowest = asyncio.run(slow_headers_phase(port, scale.pick(20, 60)))
    sessions = sum(polls["server_sessions"].values())
    lines = [
        line("11.poll.healthz_p99", polls["healthz_p99_ms"], 100, "ms"),
        line("11.poll.connections", sessions, pool + 1, "sessions"),
        line("11.poll.woken", polls["woken"], waiters, "waiters", at_most=False),
        line("11.one_run.errors", errors, 0, "errors"),
        line("11.slow_headers.healthz_max", slowest, 1000, "ms"),
    ]
    for text in lines:
        print(text, flush=True)
    report.note(
        f"{waiters} long-polls: server sessions {polls['server_sessions']} (pool {pool} + "
        f"listener), server threads {polls['server_threads']}, timed out "
        f"{polls['timed_out']}, errors {polls['errors']}, /healthz p50 "
        f"{polls['healthz_p50_ms']:.1f} ms; RLIMIT_NOFILE {files}"
    )
    report.data.update(
        {"polls": polls, "one_run_errors": errors, "slow_headers_max_ms": slowest, "lines": lines}
    )
    return report
