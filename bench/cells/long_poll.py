"""Cell 8: long-poll wake-up, from an append's commit to the waiter returning.

agentrun: W waiter threads, each in a loop of `runs.waiting.wait_for_event(run_id=…,
after_seq=…)` on its own run; that function opens its own LISTEN connection per call
(and the waiter thread's Django connection runs the "already there?" check). The appender
(another connection) appends one event at a time in the append service's transaction shape
(cell 1's raw-SQL append, so the moment COMMIT is sent can be stamped), round robin over
the waited runs, with a short gap so a waiter is armed again before its run's next event.
Latency = the waiter's return - the moment the append's COMMIT was sent.

Reference (a limit): the same waiters multiplexed on ONE long-lived LISTEN connection
(a dispatcher thread reads notifications and wakes the waiter of that run), the shape of
PgQueuer's and Procrastinate's listeners. Same appender, same rounds.

With 200 waiters agentrun needs 2 connections per waiter (400 > max_connections=100 on
this server), so that figure runs agentrun with as many waiters as the server's free
connections allow and says so in its parameters; the reference runs the same number.
A separate reference-only line shows the multiplexed listener at the full 200.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import connection

from bench import env, fixtures
from bench.cells.event_append import raw_append
from bench.harness import CellReport, Figure, Ledger, Sample, Scale, compare
from runs.services.events import RUN_CHANGE_CHANNEL
from runs.waiting import wait_for_event

WAKE_TIMEOUT_S = 5.0


class Waiter(threading.Thread):
    """Waits on one run over and over; `woke` is set (and `wakes` stamped) per wake."""

    def __init__(self, run: fixtures.ClaimedRun, after_seq: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.run_ref = run
        self.after = after_seq
        self.stop = stop
        self.woke = threading.Event()
        self.wakes: list[float] = []
        self.errors: list[str] = []

    def stamp(self) -> None:
        self.wakes.append(time.perf_counter())
        self.after += 1
        self.woke.set()


class AgentrunWaiter(Waiter):
    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if wait_for_event(run_id=self.run_ref.run_id, after_seq=self.after, timeout_s=2):
                    self.stamp()
        except Exception as error:
            self.errors.append(repr(error))
        finally:
            connection.close()


class MultiplexedWaiter(Waiter):
    """Blocks on an in-process event that the shared listener sets for its run."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.inbox = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.inbox.wait(timeout=2):
                self.inbox.clear()
                self.stamp()


class SharedListener(threading.Thread):
    def __init__(self, waiters: dict[str, MultiplexedWaiter], stop: threading.Event):
        super().__init__(daemon=True)
        self.waiters, self.stop = waiters, stop
        self.conn = psycopg.connect(fixtures.raw_dsn(), autocommit=True)
        self.conn.execute(f"LISTEN {RUN_CHANGE_CHANNEL}")

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                for notice in self.conn.notifies(timeout=0.5):
                    waiter = self.waiters.get(notice.payload)
                    if waiter is not None:
                        waiter.inbox.set()
        finally:
            self.conn.close()


def append_one(conn: Any, run: fixtures.ClaimedRun, n: int) -> float:
    """Append one event in the service's transaction shape; return when COMMIT was sent."""
    return raw_append(conn, run, [{"message": "wake", "n": n}], notify=True, stamp_commit=True)


def last_seqs(runs: list[fixtures.ClaimedRun]) -> dict[str, int]:
    with fixtures.raw_connect() as conn:
        rows = conn.execute(
            "SELECT run_id, max(seq) FROM agentrun_events WHERE run_id = ANY(%s) GROUP BY 1",
            [[r.run_id for r in runs]],
        ).fetchall()
    return dict(rows)


def wake_sample(
    kind: str, runs: list[fixtures.ClaimedRun], *, rounds: int, gap_s: float
) -> Callable[[], Sample]:
    waiters = len(runs)

    def run() -> Sample:
        stop = threading.Event()
        seqs = last_seqs(runs)
        if kind == "agentrun":
            crew: list[Waiter] = [AgentrunWaiter(r, seqs[r.run_id], stop) for r in runs]
            listener = None
        else:
            crew = [MultiplexedWaiter(r, seqs[r.run_id], stop) for r in runs]
            listener = SharedListener({w.run_ref.run_id: w for w in crew}, stop)  # type: ignore[misc]
            listener.start()
        for waiter in crew:
            waiter.start()
        time.sleep(0.3 + 0.005 * waiters)  # every waiter connected and listening
        latencies, lost = [], 0
        appender = fixtures.raw_connect()
        began = time.perf_counter()
        for n in range(rounds):
            waiter = crew[n % waiters]
            waiter.woke.clear()
            committed = append_one(appender, waiter.run_ref, n)
            if waiter.woke.wait(WAKE_TIMEOUT_S):
                latencies.append((waiter.wakes[-1] - committed) * 1000)
            else:
                lost += 1
            time.sleep(gap_s)
        elapsed = time.perf_counter() - began
        stop.set()
        for index, waiter in enumerate(crew):  # wake everyone so they see `stop`
            append_one(appender, waiter.run_ref, rounds + index)
        appender.close()
        for waiter in crew:
            waiter.join(timeout=10)
        if listener is not None:
            listener.join(timeout=5)
        errors = [e for w in crew for e in w.errors]
        ledger = Ledger(expected=rounds, seen=rounds - lost, lost=lost)
        if errors:
            ledger.notes.append(f"{len(errors)} waiter errors, first: {errors[0]}")
        return Sample(rounds - lost, elapsed, ledger, latencies, {"waiters": waiters})

    return run


def connection_budget() -> int:
    """Waiters agentrun can hold without starving the shared server (2 connections each)."""
    with env.admin_connect() as conn:
        limit = int(conn.execute("SHOW max_connections").fetchone()[0])
        used = conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()[0]
    return max(1, (limit - used - 30) // 2)


def run(scale: Scale) -> CellReport:
    report = CellReport()
    gap = scale.pick(0.02, 0.03)
    budget = connection_budget()
    runs = fixtures.claimed_runs(max(budget, 200), with_session=False)
    for requested in (1, 200):
        waiters = min(requested, budget)
        rounds = scale.pick(20, 120 if requested == 1 else 200)
        if waiters < requested:
            report.note(
                f"{requested} waiters need {2 * requested} connections on agentrun's side "
                f"(a LISTEN connection per wait_for_event call + the thread's Django "
                f"connection); this server allows {budget} waiters, so the figure runs "
                f"{waiters} on both sides"
            )
        figure = Figure(
            f"8.wake.{requested}",
            f"long-poll wake-up, {waiters} waiters",
            "agentrun",
            wake_sample("agentrun", runs[:waiters], rounds=rounds, gap_s=gap),
            "shared-listen",
            wake_sample("shared", runs[:waiters], rounds=rounds, gap_s=gap),
            params={"waiters_requested": requested, "waiters": waiters, "rounds": rounds},
            metric="p50",
            unit="ms",
            reference_kind="limit",
        )
        report.outcomes.append(compare(figure))
    full = wake_sample("shared", runs[:200], rounds=scale.pick(30, 200), gap_s=gap)()
    report.data["shared_listener_200"] = full.as_dict()
    report.note(
        f"reference alone at 200 waiters (1 connection): p50 {full.pct(50):.2f} ms, "
        f"p99 {full.pct(99):.2f} ms, lost {full.ledger.lost}"
    )
    return report
