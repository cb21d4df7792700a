"""Cell 3: draining dispatch intents, against PgQueuer, Procrastinate and raw SQL.

agentrun: n pending dispatch intents (each with its pending run and `turn` command, on
an unlimited bench backend profile, `{"launch_profile": "noop"}`), drained by 2 worker processes
x N threads (N = 4, 16), each thread looping `dispatch.services.launch.dispatch_batch`
(batch 10) with a launcher that starts nothing. Per intent that is the real path: SKIP
LOCKED claim, the per-profile runner-create fence and capacity count, a run-scoped runner
key, the fenced completion (run, command, intent locks; runner job; `runner-dispatched`
event).

References, each drained by 2 processes x N slots, batch 10, interleaved A B C D x 3:
- PgQueuer (asyncpg, `max_concurrent_tasks` = N x batch, drain mode), n no-op jobs;
- Procrastinate (psycopg, `concurrency` = N), n no-op jobs;
- the raw-SQL ceiling: the same intents claimed with one `UPDATE … FOR UPDATE SKIP LOCKED`
  statement (batch 10) and completed fenced by (owner, attempt) in a second one;
- "raw-writeset" (`bench.writeset`): agentrun's own durable write set per intent (the
  claim with its lease, attempt and runner key; the settle's run and command locks, the
  intents' compare-and-set, the runner jobs, the `runner-dispatched` events with their
  seqs and the session touch, the NOTIFY) in hand-written psycopg, 2 round trips per
  batch. Printed against agentrun (how far agentrun is from its own write set's ceiling)
  and, from the same repetitions, against PgQueuer (whether that write set can reach
  PgQueuer at all on this machine); and "raw-writeset-steps", the same statements one
  round trip each (7 per batch, agentrun's 8): agentrun against it is its Python alone.

Each side's drain also counts, untimed, what it wrote per item: rows inserted, updated
(HOT) and deleted in the bench database, and WAL records and bytes of the bench
database's relations (pg_walinspect), printed as the cell's notes.

The full run drains the issue's 20,000 items at N = 4 and 5,000 at N = 16 (the drain rate
is flat in n: cell 10 checks that against a 10x history). Also: agentrun with the same
intents spread over 8 unlimited profiles, to show what the per-profile fence costs.
The ledger: every seeded item executed exactly once (from the workers' records), and for
agentrun every intent `dispatched` with one runner job.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import queues
from bench.celery_workers import (
    celery_workers,
    drain_through_celery,
    journal_starts,
    producing_to_redis,
    wait_dispatched,
)
from bench.harness import (
    CellReport,
    Figure,
    Outcome,
    Sample,
    Scale,
    between_references,
    compare,
    compare_many,
)
from bench.profiling import print_summary, profiled

PROCESSES = 2


def drain_sample(
    kind: str,
    *,
    n: int,
    slots: int,
    batch: int = 10,
    profiles: int = 1,
    clear: Callable[[], None] = queues.clear_queues,
    writes: bool = False,
) -> Callable[[], Sample]:
    """One drain of n items by `kind`'s workers. `writes`: also count, untimed, what the
    drain wrote per item (`queues.writes_between`: rows and WAL), in `extra["writes"]`."""

    def run() -> Sample:
        clear()
        ids = queues.seed(kind, n, profiles=profiles)
        reaped = queues.children_cpu_s()
        pool = queues.Pool(kind, processes=PROCESSES, slots=slots, batch=batch)
        try:
            mark = queues.write_mark() if writes else None
            started = sum(queues.process_cpu_s(pid) for pid in pool.pids)
            go = pool.go()
            result = pool.collect()
        finally:
            pool.kill()
        # The workers' own CPU for the drain: all they used, less their start-up.
        worker_cpu = queues.children_cpu_s() - reaped - started
        ledger = queues.execution_ledger(ids, result.executed)
        extra: dict[str, Any] = {}
        if mark is not None:
            extra["writes"] = queues.writes_between(mark, n)
            extra["writes"]["worker_cpu_ms"] = round(worker_cpu * 1000 / n, 3)
        unwritten = sum(report.get("unwritten", 0) for report in result.reports)
        if unwritten:
            ledger.notes.append(f"{unwritten} claims not written by their settle")
        if kind in ("agentrun", "writeset", "writeset-steps"):
            facts = queues.intent_ledger(ids)
            extra["database"] = facts
            undispatched = n - facts["states"].get("dispatched", 0)
            if undispatched:
                ledger.notes.append(f"{undispatched} intents not dispatched")
                ledger.lost = max(ledger.lost, undispatched)
            ledger.duplicates += facts["runs_with_two_jobs"]
        return Sample(n, max(result.end - go, 1e-6), ledger, extra=extra)

    return run


def celery_sample(*, n: int, slots: int, batch: int = 10) -> Callable[[], Sample]:
    """The same drain through Celery (`bench.celery_workers`): 2 worker processes x N
    threads running the deployed `dispatch.dispatch_batch` task, which queues a follow-up
    while its batches come back full, and each worker's LISTEN drain (`dispatch.listener`),
    woken by the seed's commit. The backlog is committed once the workers are up (seeded
    before, the listeners drained it at their start, before the clock ran); then 2 x N task
    messages are sent, and the rate runs from the seed's commit to the last intent's
    `dispatched_at`. Before it, a warm-up drain of two batches per thread, then emptied:
    PgQueuer's workers connect before their clock starts, and so, here, do agentrun's
    threads (each its connection opened, the task's modules imported)."""

    def run() -> Sample:
        queues.clear_queues()
        journal = Path(tempfile.mkdtemp(prefix="drain-celery-")) / "journal.log"
        workers = celery_workers(processes=PROCESSES, slots=slots, batch=batch, journal=journal)
        with workers, producing_to_redis():
            drain_through_celery(PROCESSES * slots * batch * 2, PROCESSES * slots, journal)
            queues.clear_queues()
            journal.write_text("")  # the workers append to it: from here, the drain's own
            ids, go = drain_through_celery(n, PROCESSES * slots, journal, wait=False)
            last = wait_dispatched(journal, n, timeout=max(120.0, n / 50))
        ledger = queues.execution_ledger(ids, [item for item, _ in journal_starts(journal)])
        facts = queues.intent_ledger(ids)
        undispatched = n - facts["states"].get("dispatched", 0)
        if undispatched:
            ledger.notes.append(f"{undispatched} intents not dispatched")
            ledger.lost = max(ledger.lost, undispatched)
        ledger.duplicates += facts["runs_with_two_jobs"]
        return Sample(n, max(last - go, 1e-6), ledger, extra={"database": facts})

    return run


def run(scale: Scale) -> CellReport:
    report = CellReport()
    queues.install_peers()
    # The 20,000 at N = 4; N = 16 and the Celery drain with fewer (the rate is flat
    # in n, and cell 10 checks it against a 10x history) to keep the suite in 20 minutes.
    plan = scale.pick(((4, 300),), ((4, 20_000), (16, 5_000)))
    for slots, n in plan:
        outcomes = compare_many(drain_figures(n=n, slots=slots), scale.heavy_reps)
        report.outcomes += outcomes
        report.outcomes += writeset_vs_peer(outcomes, slots=slots)
        for line in write_notes(outcomes):
            report.note(line)
    celery_n = scale.pick(300, 5_000)
    report.outcomes.append(celery_figure(n=celery_n, slots=4, reps=scale.heavy_reps))
    if not scale.quick:
        report.outcomes.append(fence_figure(2_000))
    if scale.profile:
        report.data["profile"] = profile_worker(scale, 3_000)
    return report


# Procrastinate's drain rate falls with its backlog (here ~770/s at 1,200 jobs, ~120/s at
# 20,000): a 20,000 sample would take minutes, so it drains at most this many.
PROCRASTINATE_MAX = 5_000


def drain_figures(*, n: int, slots: int) -> list[Figure]:
    params = {"items": n, "processes": PROCESSES, "slots": slots, "batch": 10}
    peer_n = min(n, PROCRASTINATE_MAX)
    agentrun = drain_sample("agentrun", n=n, slots=slots, writes=True)
    pgqueuer = drain_sample("pgqueuer", n=n, slots=slots, writes=True)
    return [
        Figure(
            f"3.drain.{slots}.pgqueuer",
            f"drain {n} items vs PgQueuer",
            "agentrun",
            agentrun,
            "pgqueuer",
            pgqueuer,
            params=params,
            unit="items/s",
            goal=(">=", 1.0),
        ),
        Figure(
            f"3.drain.{slots}.procrastinate",
            f"drain {n} items vs Procrastinate draining {peer_n}",
            "agentrun",
            agentrun,
            "procrastinate",
            drain_sample("procrastinate", n=peer_n, slots=slots),
            params={**params, "procrastinate_items": peer_n},
            unit="items/s",
        ),
        Figure(
            f"3.drain.{slots}.raw",
            f"drain {n} items vs the raw-SQL ceiling",
            "agentrun",
            agentrun,
            "raw-sql",
            drain_sample("raw", n=n, slots=slots),
            params=params,
            unit="items/s",
            reference_kind="limit",
        ),
        Figure(
            f"3.drain.{slots}.writeset",
            f"drain {n} items vs agentrun's write set in raw SQL",
            "agentrun",
            agentrun,
            "raw-writeset",
            drain_sample("writeset", n=n, slots=slots, writes=True),
            params=params,
            unit="items/s",
            reference_kind="limit",
            note="bench.writeset: the same rows and locks per intent, psycopg, 2 round trips",
        ),
        Figure(
            f"3.drain.{slots}.writeset-steps",
            f"drain {n} items vs agentrun's write set in raw SQL, a round trip per statement",
            "agentrun",
            agentrun,
            "raw-writeset-steps",
            drain_sample("writeset-steps", n=n, slots=slots),
            params=params,
            unit="items/s",
            reference_kind="limit",
            note="bench.writeset unpipelined: 7 round trips per batch (agentrun 8)",
        ),
    ]


def _outcome(outcomes: list[Outcome], key: str) -> Outcome | None:
    return next((o for o in outcomes if o.figure.key == key and not o.error), None)


def writeset_vs_peer(outcomes: list[Outcome], *, slots: int) -> list[Outcome]:
    """raw-writeset / PgQueuer, from the repetitions already run (each pair drained in the
    same A B C D E round): can agentrun's write set, with no Django at all, reach the
    peer on this machine? No goal: it is the evidence for the goal of `.pgqueuer`."""
    writeset = _outcome(outcomes, f"3.drain.{slots}.writeset")
    peer = _outcome(outcomes, f"3.drain.{slots}.pgqueuer")
    if writeset is None or peer is None:
        return []
    return [
        between_references(
            writeset,
            peer,
            key=f"3.drain.{slots}.writeset-pgqueuer",
            title="agentrun's write set in raw SQL vs PgQueuer",
            note="derived from the .writeset and .pgqueuer repetitions, no extra drain",
        )
    ]


def write_notes(outcomes: list[Outcome]) -> list[str]:
    """One note per side that counted its writes: the median per item of rows inserted,
    updated (HOT), deleted, WAL records / bytes (full-page images) of the bench database,
    and the worker processes' CPU (user + system, start-up excluded), over its
    repetitions."""
    sides: dict[str, list[dict[str, Any]]] = {}
    for outcome in outcomes:
        for name, samples in (
            (outcome.figure.a_name, outcome.a),
            (outcome.figure.b_name, outcome.b),
        ):
            if name in sides:
                continue
            counted = [s.extra["writes"] for s in samples if "writes" in s.extra]
            if counted:
                sides[name] = counted
    notes = []
    for name, counted in sides.items():
        counted = [c for c in counted if "wal_bytes" in c]  # WAL read (see `wal_error`)
        if not counted:
            continue
        med = {
            key: statistics.median(c[key] for c in counted)
            for key, value in counted[0].items()
            if isinstance(value, int | float)
        }
        names = {name for c in counted for name in c.get("wal_by_table", {})}
        tables = {
            name: statistics.median(c.get("wal_by_table", {}).get(name, 0) for c in counted)
            for name in names
        }
        ranked = sorted(tables.items(), key=lambda item: -item[1])
        top = ", ".join(f"{name} {b:,.0f}" for name, b in ranked[:6])
        notes.append(
            f"{name} writes per item: {med['ins']:.2f} rows inserted, {med['upd']:.2f} updated"
            f" ({med['hot']:.2f} HOT), {med['del']:.2f} deleted; WAL {med['wal_records']:.1f}"
            f" records, {med['wal_bytes']:,.0f} bytes (of which full-page images"
            f" {med['wal_fpi_bytes']:,.0f}); the workers' CPU {med['worker_cpu_ms']:.2f} ms;"
            f" median of {len(counted)}; WAL bytes by table: {top}"
        )
    return notes


def celery_figure(*, n: int, slots: int, reps: int) -> Any:
    """The deployed path: Celery workers running the dispatch task, vs PgQueuer."""
    return compare(
        Figure(
            f"3.drain.{slots}.celery",
            f"drain {n} items through Celery (the dispatch task) vs PgQueuer",
            "agentrun-celery",
            celery_sample(n=n, slots=slots),
            "pgqueuer",
            drain_sample("pgqueuer", n=n, slots=slots),
            params={"items": n, "processes": PROCESSES, "slots": slots, "batch": 10},
            unit="items/s",
            goal=(">=", 0.5),  # issue 18: the deployed path >= 0.5x PgQueuer
        ),
        reps,
    )


def fence_figure(n: int, reps: int = 3) -> Any:
    """The same drain on a profile with `max_concurrent_runs` (above n, so nothing waits):
    what the runner-create fence, taken only for limited profiles, costs."""
    return compare(
        Figure(
            "3.drain.4.limited",
            "agentrun on a limited profile (runner-create fence) vs an unlimited one",
            "limited",
            drain_sample("agentrun", n=n, slots=4, clear=_clear_with_limit(n * 10)),
            "unlimited",
            drain_sample("agentrun", n=n, slots=4),
            params={"items": n, "processes": PROCESSES, "slots": 4, "batch": 10},
            unit="items/s",
            reference_kind="self",
        ),
        reps,
    )


def _clear_with_limit(limit: int) -> Callable[[], None]:
    def clear() -> None:
        queues.clear_queues()
        queues.set_bench_capacity({"max_concurrent_runs": limit})

    return clear


def profile_worker(scale: Scale, n: int) -> dict[str, Any]:
    """py-spy one agentrun dispatch worker process while it drains."""

    seconds = scale.pick(3, 8)
    queues.clear_queues()
    queues.seed("agentrun", max(n, 2000))
    pool = queues.Pool("agentrun", processes=PROCESSES, slots=4, batch=10)
    try:
        with profiled("dispatch-worker", seconds=seconds, focus="slot", pid=pool.pids[0]) as s:
            pool.go()
            time.sleep(seconds + 0.5)
        pool.collect()
    finally:
        pool.kill()
    print_summary(s)
    return s
