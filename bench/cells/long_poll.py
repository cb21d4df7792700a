"""Cell 8: long-poll wake-up, from an append's commit to the waiter returning.

agentrun: W waiter threads, each in a loop of `runs.waiting.wait_for_event(run_id=…,
after_seq=…)` on its own run. That function sleeps without a database connection: the
process's one run-change listener LISTENs, checks the waiters' runs (one query per batch
on its own connection) and wakes those whose run passed their seq. The appender (another
connection) appends one event at a time in the append service's transaction shape (cell
1's raw-SQL append, so the moment COMMIT is sent can be stamped), round robin over the
waited runs, with a short gap so a waiter is armed again before its run's next event.
Latency = the waiter's return - the moment the append's COMMIT was sent.

Reference (a limit): the same waiters multiplexed on ONE long-lived LISTEN connection
(a dispatcher thread reads notifications and wakes the waiter of that run, with no query),
the shape of PgQueuer's and Procrastinate's listeners. Same appender, same rounds.

Both sides run the issue's 1 and 200 waiters. Each sample also counts the server
connections its waiters hold while they sleep (backends on the bench database, less those
open before the waiters started): the point of the shared listener is that this stays 1.
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
from bench.harness import CellReport, Figure, Ledger, Outcome, Sample, Scale, compare
from runs.services.event_log import RUN_CHANGE_CHANNEL
from runs.waiting import stop_run_change_listener, wait_for_event

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
                    # '<run id>:<last seq>'; woken without a query, trusting the notification.
                    waiter = self.waiters.get(notice.payload.partition(":")[0])
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


def backends() -> int:
    """Server connections to the bench database, the one asking excluded."""
    with env.admin_connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0])


def start_crew(
    kind: str, runs: list[fixtures.ClaimedRun], stop: threading.Event
) -> tuple[list[Waiter], SharedListener | None]:
    seqs = last_seqs(runs)
    if kind == "agentrun":
        return [AgentrunWaiter(r, seqs[r.run_id], stop) for r in runs], None
    crew = [MultiplexedWaiter(r, seqs[r.run_id], stop) for r in runs]
    listener = SharedListener({w.run_ref.run_id: w for w in crew}, stop)
    listener.start()
    return list(crew), listener


def drive(crew: list[Waiter], appender: Any, rounds: int, gap_s: float) -> tuple[list[float], int]:
    """Append round robin over the crew; the wake-up latencies and the wakes that never came."""
    latencies, lost = [], 0
    for n in range(rounds):
        waiter = crew[n % len(crew)]
        waiter.woke.clear()
        committed = append_one(appender, waiter.run_ref, n)
        if waiter.woke.wait(WAKE_TIMEOUT_S):
            latencies.append((waiter.wakes[-1] - committed) * 1000)
        else:
            lost += 1
        time.sleep(gap_s)
    return latencies, lost


def wake_sample(
    kind: str, runs: list[fixtures.ClaimedRun], *, rounds: int, gap_s: float
) -> Callable[[], Sample]:
    waiters = len(runs)

    def run() -> Sample:
        stop = threading.Event()
        stop_run_change_listener()  # each agentrun sample starts (and counts) its own listener
        before = backends()
        crew, listener = start_crew(kind, runs, stop)
        for waiter in crew:
            waiter.start()
        time.sleep(0.3 + 0.005 * waiters)  # every waiter connected and listening
        held = backends() - before  # while every waiter sleeps
        appender = fixtures.raw_connect()
        began = time.perf_counter()
        latencies, lost = drive(crew, appender, rounds, gap_s)
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
        extra = {"waiters": waiters, "connections_while_waiting": held}
        return Sample(rounds - lost, elapsed, ledger, latencies, extra)

    return run


def connections_note(outcome: Outcome) -> str:
    def most(samples: list[Sample]) -> int:
        return max((s.extra.get("connections_while_waiting", 0) for s in samples), default=0)

    return (
        f"{outcome.figure.key}: server connections held while the waiters sleep (most of "
        f"{len(outcome.a)} samples): agentrun {most(outcome.a)}, shared-listen {most(outcome.b)}"
    )


def run(scale: Scale) -> CellReport:
    report = CellReport()
    gap = scale.pick(0.02, 0.03)
    runs = fixtures.claimed_runs(200, with_session=False)
    for waiters in (1, 200):
        rounds = scale.pick(20, 120 if waiters == 1 else 200)
        figure = Figure(
            f"8.wake.{waiters}",
            f"long-poll wake-up, {waiters} waiters",
            "agentrun",
            wake_sample("agentrun", runs[:waiters], rounds=rounds, gap_s=gap),
            "shared-listen",
            wake_sample("shared", runs[:waiters], rounds=rounds, gap_s=gap),
            params={"waiters": waiters, "rounds": rounds},
            metric="p50",
            unit="ms",
            reference_kind="limit",
        )
        outcome = compare(figure)
        report.outcomes.append(outcome)
        report.note(connections_note(outcome))
    return report
