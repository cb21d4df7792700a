"""Cell 5: chaos. Kill one worker, freeze the other, and count what breaks.

n items of W ms each, 2 worker processes x 4 slots; the lease (agentrun's
`AGENTRUN_DISPATCH_LEASE_MS`) = PgQueuer's heartbeat timeout = Procrastinate's stalled-
worker threshold = L. At K s one worker is SIGKILLed (a supervisor starts a replacement
at once, as Kubernetes or systemd would: without one nobody could pick up the frozen
worker's items); at S s the other is SIGSTOPped for F s, then SIGCONT: it wakes up holding
claims that expired meanwhile and that the replacement may have taken over.

Counted, from each process's append-only journal (it survives SIGKILL) and the database:
- lost: items never completed when the run ends (must be 0);
- duplicate executions: items whose handler started more than once (expected after a
  kill: at-least-once);
- stale completions accepted (agentrun must be 0): an intent completed twice (two runner
  jobs for its run); refusals the frozen worker got are counted as `fenced`;
- state regressions: agentrun intents not `dispatched` at the end, or more than one
  `runner-dispatched` event per intent;
- time to recover: from SIGCONT to the last item completed.

Procrastinate has no built-in stalled-job retry; its documented recipe is a periodic
`get_stalled_jobs` + `retry_job`, which the bench runs every 0.5 s for it.
The issue's timeline is 5,000 x 200 ms, L = 10 s, kill at 10 s, freeze 25 s at 20 s:
at 8 slots that is over two minutes per side. The timeline here is scaled (see PLAN), the
same for all three sides, each with the same items, enough to still be working when the
freeze ends. One run per side (counts, not rates).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import env, queues
from bench.harness import CellReport, Scale

PLAN = {  # quick, full
    "items": (400, 800),  # enough that every side still works when the freeze ends
    "work_ms": (50, 200),
    "lease_s": (1.0, 4.0),
    "kill_at_s": (0.5, 3.0),
    "stop_at_s": (1.0, 6.0),
    "stop_for_s": (2.0, 10.0),
}


def plan(scale: Scale) -> dict[str, Any]:
    return {name: scale.pick(*values) for name, values in PLAN.items()}


def done_count(kind: str) -> int:
    with env.admin_connect() as conn:
        if kind == "agentrun":
            sql = "SELECT count(*) FROM agentrun_runner_dispatch_intents WHERE state = 'dispatched'"
        elif kind == "pgqueuer":
            sql = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"
        else:
            sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        return int(conn.execute(sql).fetchone()[0])


def retry_stalled_procrastinate(stop: threading.Event, stall_s: float) -> None:
    from procrastinate.exceptions import ConnectorException

    from bench.workers import procrastinate_app

    async def loop() -> None:
        app = procrastinate_app()
        async with app.open_async():
            while not stop.is_set():
                stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=stall_s)
                for job in stalled:
                    # A job can finish between the two calls; retrying it then is refused.
                    with contextlib.suppress(ConnectorException):
                        await app.job_manager.retry_job(job)
                await asyncio.sleep(0.5)

    asyncio.run(loop())


def chaos_run(kind: str, p: dict[str, Any]) -> dict[str, Any]:
    queues.clear_queues()
    expected = queues.seed(kind, p["items"])
    journal_dir = Path(tempfile.mkdtemp(prefix=f"chaos-{kind}-"))
    os.environ["AGENTRUN_DISPATCH_LEASE_MS"] = str(int(p["lease_s"] * 1000))
    options: dict[str, Any] = {
        "latency": True,
        "until": 10_000,
        "seconds": 10_000,
        "work_ms": p["work_ms"],
        "stall_s": p["lease_s"] if kind == "pgqueuer" else 0,
        "idle": 10_000,
    }

    def pool(name: str) -> queues.Pool:
        return queues.Pool(
            kind,
            processes=1,
            slots=4,
            batch=1 if kind == "agentrun" else 4,
            journal=str(journal_dir / f"{name}.log"),
            **options,
        )

    stop = threading.Event()
    pools = [pool("a"), pool("b")]
    helper = None
    if kind == "procrastinate":
        helper = threading.Thread(
            target=retry_stalled_procrastinate, args=(stop, p["lease_s"]), daemon=True
        )
        helper.start()
    began = time.time()
    try:
        for each in pools:
            each.go()
        _sleep_until(began + p["kill_at_s"])
        os.kill(pools[0].pids[0], signal.SIGKILL)
        replacement = pool("a2")
        replacement.go()
        pools.append(replacement)
        _sleep_until(began + p["stop_at_s"])
        os.kill(pools[1].pids[0], signal.SIGSTOP)
        _sleep_until(began + p["stop_at_s"] + p["stop_for_s"])
        resumed = time.time()
        os.kill(pools[1].pids[0], signal.SIGCONT)
        deadline = time.time() + 120 + len(expected) * p["work_ms"] / 1000
        while done_count(kind) < len(expected) and time.time() < deadline:
            time.sleep(0.2)
        finished = time.time()
        time.sleep(p["lease_s"])  # let a late duplicate show itself
    finally:
        stop.set()
        for each in pools:
            each.kill()
        os.environ.pop("AGENTRUN_DISPATCH_LEASE_MS", None)
    return tally(kind, expected, journal_dir, began, resumed, finished)


def _sleep_until(moment: float) -> None:
    delay = moment - time.time()
    if delay > 0:
        time.sleep(delay)


def tally(
    kind: str, expected: list[str], journal_dir: Path, began: float, resumed: float, end: float
) -> dict[str, Any]:
    starts: Counter[str] = Counter()
    fenced = 0
    for path in journal_dir.glob("*.log"):
        for line in path.read_text().splitlines():
            what, item, _ = line.split(" ")
            if what == "start":
                starts[item] += 1
            elif what == "fenced":
                fenced += int(item)
    completed = done_count(kind)
    out: dict[str, Any] = {
        "items": len(expected),
        "completed": completed,
        "lost": len(expected) - min(completed, len(expected)),
        "duplicate_executions": sum(n - 1 for n in starts.values() if n > 1),
        "never_started": len(set(expected) - set(starts)),
        "seconds_total": round(end - began, 2),
        "time_to_recover_s": round(end - resumed, 2),
    }
    if kind == "agentrun":
        with env.admin_connect() as conn:
            out["stale_completions_accepted"] = conn.execute(
                "SELECT count(*) FROM (SELECT run_id FROM agentrun_runner_jobs GROUP BY run_id"
                " HAVING count(*) > 1) d"
            ).fetchone()[0]
            out["state_regressions"] = (
                conn.execute(
                    "SELECT count(*) FROM agentrun_runner_dispatch_intents"
                    " WHERE state <> 'dispatched'"
                ).fetchone()[0]
                + conn.execute(
                    "SELECT count(*) FROM (SELECT run_id FROM agentrun_events WHERE"
                    " payload->>'phase' = 'runner-dispatched'"
                    " GROUP BY run_id HAVING count(*) > 1) d"
                ).fetchone()[0]
            )
            out["fenced_refusals"] = fenced
    else:
        out["stale_completions_accepted"] = "n/a: no fencing token (see duplicates)"
    return out


def run(scale: Scale) -> CellReport:
    report = CellReport()
    queues.install_peers()
    p = plan(scale)
    report.data["plan"] = p
    report.note(f"plan: {p}")
    for kind in ("agentrun", "pgqueuer", "procrastinate"):
        try:
            result = chaos_run(kind, p)
        except Exception as error:  # one side failing must not hide the others
            result = {"error": f"{type(error).__name__}: {error}"}
        report.data[kind] = result
        report.note(f"{kind}: {result}")
    return report
