"""Cell 16: a runner's lease heartbeat, the service against the same transaction in raw SQL.

agentrun: `runs.services.lifecycle.heartbeat_run(lease_ms=60_000)` in a loop from 8
threads, each heartbeating its own claimed run (8 runs, each with its runner's row in
`agentrun_runners`, so the runner UPDATE touches a row).

Reference (a peer, not a limit): the seed's transaction, the shape agentrun's heartbeat
had until issue 18's last round, by hand with psycopg on its own connection per thread,
every statement prepared from its first use (`prepare=True`; cell 1's raw side leaves it
to psycopg's threshold, which prepares from the fifth use): lock the run
(`SELECT … FOR UPDATE`), check the claim (epoch, runner, not terminal), UPDATE the run's
and the lease's `lease_expires_at`, UPDATE the runner's `heartbeat_at`, COMMIT.

Ledger, after every sample: each run's row and lease row read back: both
`lease_expires_at` equal and set by a heartbeat of the sample (between its start and end
plus the lease), the lease epoch and status unchanged, the runner's `heartbeat_at` inside
the sample; every call acknowledged (an error in a call is a lost heartbeat, not a crash).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from bench import fixtures
from bench.harness import CellReport, Figure, Ledger, Sample, Scale, compare
from bench.queries import captured
from bench.worker_threads import WorkerResult, run_workers
from runs.models import TERMINAL_RUN_STATUSES
from runs.services.lifecycle import heartbeat_run

RUNS = THREADS = 8
LEASE_MS = 60_000

LOCK_RUN = (
    "SELECT status, claimed_by, lease_epoch, tenant_id FROM agentrun_runs WHERE id = %s FOR UPDATE"
)
EXTEND_RUN = "UPDATE agentrun_runs SET lease_expires_at = %s, updated_at = %s WHERE id = %s"
EXTEND_LEASE = "UPDATE agentrun_leases SET lease_expires_at = %s, updated_at = %s WHERE run_id = %s"
TOUCH_RUNNER = "UPDATE agentrun_runners SET heartbeat_at = %s WHERE id = %s AND tenant_id = %s"


def claimed_runs() -> list[fixtures.ClaimedRun]:
    """Fresh claimed runs (cell 1's fixtures), each with its runner's row."""
    runs = fixtures.claimed_runs(RUNS, with_session=False)
    now = datetime.now(UTC)
    with fixtures.raw_connect() as conn, conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO agentrun_runners (id, tenant_id, run_id, metadata, registered_at,"
            " heartbeat_at) VALUES (%s, %s, %s, '{}', %s, %s)",
            [[run.runner_id, fixtures.BENCH_TENANT, run.run_id, now, now] for run in runs],
        )
    return runs


def _call(result: WorkerResult, op: int, beat: Callable[[], Any], failed: list[str]) -> None:
    """One timed call; an error goes to `failed` (the ledger's), not `result.errors`
    (which `run_workers` raises): the sample goes on and the ledger marks it."""
    started = time.perf_counter()
    try:
        beat()
    except Exception as error:
        failed.append(repr(error))
        return
    result.latencies_ms.append((time.perf_counter() - started) * 1000)
    result.done += 1
    result.acknowledged.append(op)


def service_heartbeat(run: fixtures.ClaimedRun) -> Any:
    return heartbeat_run(
        run_id=run.run_id, runner_id=run.runner_id, lease_epoch=run.lease_epoch, lease_ms=LEASE_MS
    )


def service_side(
    runs: list[fixtures.ClaimedRun], failed: list[str]
) -> tuple[Callable[..., Any], ...]:
    def prepare(index: int) -> Any:
        connection.ensure_connection()
        return runs[index]

    def step(run: fixtures.ClaimedRun, op: int, result: WorkerResult) -> None:
        _call(result, op, lambda: service_heartbeat(run), failed)

    return prepare, step, lambda _state: fixtures.close_django_connection()


def raw_heartbeat(conn: Any, run: fixtures.ClaimedRun) -> None:
    """One heartbeat transaction: the seed's shape, by hand (psycopg sends the BEGIN)."""
    try:
        status, claimed_by, epoch, tenant = conn.execute(
            LOCK_RUN, [run.run_id], prepare=True
        ).fetchone()
        live = status not in TERMINAL_RUN_STATUSES
        if epoch != run.lease_epoch or (live and claimed_by != run.runner_id):
            raise RuntimeError("raw heartbeat: stale lease")
        if live:
            now = datetime.now(UTC)
            expires = now + timedelta(milliseconds=LEASE_MS)
            conn.execute(EXTEND_RUN, [expires, now, run.run_id], prepare=True)
            conn.execute(EXTEND_LEASE, [expires, now, run.run_id], prepare=True)
            conn.execute(TOUCH_RUNNER, [now, run.runner_id, tenant], prepare=True)
        conn.commit()
    except Exception:
        conn.rollback()
        raise


def raw_side(runs: list[fixtures.ClaimedRun], failed: list[str]) -> tuple[Callable[..., Any], ...]:
    def prepare(index: int) -> Any:
        return fixtures.raw_connect(), runs[index]

    def step(state: Any, op: int, result: WorkerResult) -> None:
        conn, run = state
        _call(result, op, lambda: raw_heartbeat(conn, run), failed)

    return prepare, step, lambda state: state[0].close()


def heartbeat_ledger(
    runs: list[fixtures.ClaimedRun],
    results: list[WorkerResult],
    errors: list[str],
    began: datetime,
    ended: datetime,
) -> Ledger:
    ledger = Ledger()
    ledger.seen = sum(r.done for r in results)
    ledger.expected = ledger.seen + len(errors)  # every call made
    ledger.lost = len(errors)
    if errors:
        ledger.notes.append(f"{len(errors)} calls failed, first: {errors[0]}")
    with fixtures.raw_connect() as conn:
        rows = conn.execute(
            "SELECT r.id, r.status, r.claimed_by, r.lease_epoch, r.lease_expires_at,"
            " l.runner_id, l.lease_epoch, l.lease_expires_at, n.heartbeat_at"
            " FROM agentrun_runs r LEFT JOIN agentrun_leases l ON l.run_id = r.id"
            " LEFT JOIN agentrun_runners n ON n.id = r.claimed_by WHERE r.id = ANY(%s)",
            [[run.run_id for run in runs]],
        ).fetchall()
    found = {row[0]: row[1:] for row in rows}
    lease = timedelta(milliseconds=LEASE_MS)
    for run in runs:
        status, claimed_by, epoch, expires, l_runner, l_epoch, l_expires, beat = found.get(
            run.run_id, (None,) * 8
        )
        problems = []
        if status != "claimed" or claimed_by != run.runner_id or l_runner != run.runner_id:
            problems.append(f"status/claim changed: {status} {claimed_by} {l_runner}")
        if epoch != run.lease_epoch or l_epoch != run.lease_epoch:
            problems.append(f"epoch {epoch}/{l_epoch} != {run.lease_epoch}")
        if expires is None or expires != l_expires:
            problems.append(f"run/lease expiry differ: {expires} {l_expires}")
        elif not began + lease <= expires <= ended + lease:
            problems.append(f"expiry {expires} not set in the sample")
        if beat is None or not began <= beat <= ended:
            problems.append(f"runner heartbeat_at {beat} not in the sample")
        if problems:
            ledger.lost += 1
            ledger.notes.append(f"{run.run_id}: " + "; ".join(problems))
    return ledger


def sample(kind: str, *, seconds: float) -> Callable[[], Sample]:
    """A side as a callable: fresh claimed runs, 8 threads for `seconds`, then the ledger."""

    def run() -> Sample:
        runs = claimed_runs()
        failed: list[str] = []
        prepare, step, finish = (service_side if kind == "service" else raw_side)(runs, failed)
        began = datetime.now(UTC)
        results, elapsed = run_workers(THREADS, prepare, step, seconds=seconds, finish=finish)
        ended = datetime.now(UTC)
        ledger = heartbeat_ledger(runs, results, failed, began, ended)
        latencies = [x for r in results for x in r.latencies_ms]
        return Sample(sum(r.done for r in results), elapsed, ledger, latencies)

    return run


def run(scale: Scale) -> CellReport:
    report = CellReport()
    one = fixtures.claimed_runs(1, with_session=False)[0]
    report.data["queries"] = {"heartbeat": captured(lambda: service_heartbeat(one))}
    counts = {name: q["count"] for name, q in report.data["queries"].items()}
    report.note(
        f"statements Django logs per heartbeat (BEGIN/COMMIT lines, if any, included): {counts}"
    )
    seconds = scale.pick(0.3, 2.0)
    figure = Figure(
        f"16.heartbeat.{THREADS}w",
        f"lease heartbeat, {THREADS} threads on {RUNS} runs (one each)",
        "agentrun",
        sample("service", seconds=seconds),
        "raw-sql",
        sample("raw", seconds=seconds),
        params={"threads": THREADS, "runs": RUNS, "lease_ms": LEASE_MS},
        unit="heartbeats/s",
        reference_kind="peer",
    )
    report.outcomes.append(compare(figure))
    return report
