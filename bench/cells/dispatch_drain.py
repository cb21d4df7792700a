"""Cell 3: draining dispatch intents, against PgQueuer, Procrastinate and raw SQL.

agentrun: n pending dispatch intents (each with its pending run and `turn` command, on
an unlimited bench backend profile, `{"launcher": "noop"}`), drained by 2 worker processes
x N threads (N = 4, 16), each thread looping `dispatch.services.launch.dispatch_batch`
(batch 10) with a launcher that starts nothing. Per intent that is the real path: SKIP
LOCKED claim, the per-profile runner-create fence and capacity count, a run-scoped runner
key, the fenced completion (run, command, intent locks; runner job; `runner-dispatched`
event).

References, each drained by 2 processes x N slots, batch 10, interleaved A B C D x 3:
- PgQueuer (asyncpg, `max_concurrent_tasks` = N x batch, drain mode), n no-op jobs;
- Procrastinate (psycopg, `concurrency` = N), n no-op jobs;
- the raw-SQL ceiling: the same intents claimed with one `UPDATE … FOR UPDATE SKIP LOCKED`
  statement (batch 10) and completed fenced by (owner, attempt) in a second one.

The issue asks for 20,000 items; at the rate agentrun drains here (about 100/s) one
repetition of that would take over three minutes, so the full run drains 1,200 (the drain
rate is flat in n: cell 10 checks that against a 10x history). Also: agentrun with the same
intents spread over 8 unlimited profiles, to show what the per-profile fence costs.
The ledger: every seeded item executed exactly once (from the workers' records), and for
agentrun every intent `dispatched` with one runner job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import queues
from bench.harness import CellReport, Figure, Sample, Scale, compare, compare_many
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
) -> Callable[[], Sample]:
    def run() -> Sample:
        clear()
        ids = queues.seed(kind, n, profiles=profiles)
        pool = queues.Pool(kind, processes=PROCESSES, slots=slots, batch=batch)
        try:
            go = pool.go()
            result = pool.collect()
        finally:
            pool.kill()
        ledger = queues.execution_ledger(ids, result.executed)
        extra: dict[str, Any] = {}
        if kind == "agentrun":
            facts = queues.intent_ledger(ids)
            extra["database"] = facts
            undispatched = n - facts["states"].get("dispatched", 0)
            if undispatched:
                ledger.notes.append(f"{undispatched} intents not dispatched")
                ledger.lost = max(ledger.lost, undispatched)
            ledger.duplicates += facts["runs_with_two_jobs"]
        return Sample(n, max(result.end - go, 1e-6), ledger, extra=extra)

    return run


def run(scale: Scale) -> CellReport:
    report = CellReport()
    queues.install_peers()
    n = scale.pick(150, 1200)
    for slots in scale.pick((4,), (4, 16)):
        params = {"items": n, "processes": PROCESSES, "slots": slots, "batch": 10}
        agentrun = drain_sample("agentrun", n=n, slots=slots)
        figures = [
            Figure(
                f"3.drain.{slots}.pgqueuer",
                f"drain {n} items vs PgQueuer",
                "agentrun",
                agentrun,
                "pgqueuer",
                drain_sample("pgqueuer", n=n, slots=slots),
                params=params,
                unit="items/s",
                goal=(">=", 1.0),
            ),
            Figure(
                f"3.drain.{slots}.procrastinate",
                f"drain {n} items vs Procrastinate",
                "agentrun",
                agentrun,
                "procrastinate",
                drain_sample("procrastinate", n=n, slots=slots),
                params=params,
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
        ]
        report.outcomes += compare_many(figures, scale.heavy_reps)
    if not scale.quick:
        report.outcomes.append(fence_figure(scale.pick(300, 600)))
    report.note(
        "Celery-driven drain not measured: the dispatch task uses the deployment's launchers"
        " (local/kubernetes), so a no-op launch needs AGENTRUN_LOCAL_RUNNER_COMMAND and a"
        " broker; the service loop above is the same code the task calls"
    )
    if scale.profile:
        report.data["profile"] = profile_worker(scale, n)
    return report


def fence_figure(n: int, reps: int = 3) -> Any:
    """The same drain with the intents spread over 8 unlimited profiles instead of 1."""
    return compare(
        Figure(
            "3.drain.4.profiles8",
            "agentrun with intents over 8 profiles vs over 1 (the runner-create fence)",
            "8-profiles",
            drain_sample("agentrun", n=n, slots=4, profiles=8),
            "1-profile",
            drain_sample("agentrun", n=n, slots=4, profiles=1),
            params={"items": n, "processes": PROCESSES, "slots": 4, "batch": 10},
            unit="items/s",
            reference_kind="self",
        ),
        reps,
    )


def profile_worker(scale: Scale, n: int) -> dict[str, Any]:
    """py-spy one agentrun dispatch worker process while it drains."""
    import time

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
