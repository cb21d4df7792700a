"""Cell 1: event append, the service against the same transaction in raw SQL.

agentrun: `runs.services.event_log.append_runner_events` (lock the run, check the claim,
next seq, insert, outbox record, touch the session, notify) from N threads, each thread
appending to one of M runs (writer w -> run w % M), every run in its own session.

Reference (a limit): the same transaction shape written by hand with psycopg on its own
connection per thread: `SELECT … FOR UPDATE` the run, check the claim, `max(seq)`, one
multi-row INSERT, `UPDATE agentrun_sessions`, `pg_notify`, COMMIT.

The reference sends its NOTIFY inside the transaction (one statement before COMMIT);
agentrun sends it after, in the same round trip as its COMMIT (`runs.sql`), so agentrun's
commits never queue on PostgreSQL's notify lock and the reference's do.

With outbox records (`raw_append(outbox=True)`, figure `1.raw-outbox.8w`): the records
agentrun writes with the Kafka outbox on, by hand in the same transaction, after the
session UPDATE: the (topic, partition key) transaction advisory lock (one statement), then
one INSERT … SELECT that draws each record's `outbox_seq` by `nextval` and inserts the
record with the same columns, the same CloudEvent value and headers (`outbox_seq` in
them) and so the same index entries. What it does not do: agentrun's records are CTEs of
its events statement (no round trip of their own); the reference spends one on the lock.
No Celery wake-up and no relay notification (agentrun's `1.outbox-listen.8w` sends the
latter, in the after-commit statement it sends anyway).

Figures: single append at 8 and 32 writers; batch of 100 per call; batch vs single
(agentrun against itself, events/s); with vs without `pg_notify` at 8 and 32 writers
(the service with `NOTIFY_ON_APPEND` switched off in the bench process only); outbox on
vs off, agentrun's and the reference's (what the records cost without agentrun's code);
each sample's WAL bytes per event (`pg_current_wal_lsn` before and after, the whole
server's, so other work on it counts too). The ledger reads every event of the runs back:
per run, seqs 1..n with no gap; per writer, its items in the order it acknowledged them;
nothing acknowledged missing.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.test.utils import override_settings
from psycopg.types.json import Jsonb

from agentrun.ids import new_id
from bench import fixtures
from bench.harness import (
    CellReport,
    Figure,
    Ledger,
    Sample,
    Scale,
    compare,
)
from bench.profiling import print_summary, profiled
from bench.queries import captured
from bench.worker_threads import WorkerResult, run_workers
from runs.services import event_log as event_service
from runs.services.event_log import RUN_CHANGE_CHANNEL, NewEvent, append_runner_events

RUNS = 8
_TEXT = "bench: compiling module 42 of 97, 1.3 MB written, cache warm, no warnings so far. " * 2


def payload(writer: int, n: int, k: int) -> dict[str, Any]:
    """~250 bytes of a runner's log line, tagged for the ledger."""
    return {"stream": "stdout", "message": _TEXT, "writer": writer, "n": n, "k": k}


# --- agentrun side -------------------------------------------------------------------


def service_side(
    runs: list[fixtures.ClaimedRun], batch: int
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def prepare(index: int) -> Any:
        connection.ensure_connection()
        return index, runs[index % len(runs)]

    def step(state: Any, op: int, result: WorkerResult) -> None:
        writer, run = state
        items = [NewEvent("log", payload(writer, op, k)) for k in range(batch)]
        started = _now()
        append_runner_events(
            run_id=run.run_id, runner_id=run.runner_id, lease_epoch=run.lease_epoch, events=items
        )
        result.latencies_ms.append((_now() - started) * 1000)
        result.done += batch
        result.acknowledged.append(op)

    return prepare, step


# --- reference side: the same transaction in raw SQL ---------------------------------

LOCK_RUN = (
    "SELECT status, claimed_by, lease_epoch, lease_expires_at, session_ref, tenant_id "
    "FROM agentrun_runs WHERE id = %s FOR UPDATE"
)
NEXT_SEQ = "SELECT coalesce(max(seq), 0) FROM agentrun_events WHERE run_id = %s"
INSERT_ROW = "(%s, %s, %s, %s, %s, %s)"
INSERT = "INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at) VALUES "
TOUCH_SESSION = (
    "UPDATE agentrun_sessions SET last_event_seq = %s, last_activity_at = %s, updated_at = %s "
    "WHERE session_id = %s"
)
NOTIFY = "SELECT pg_notify(%s, %s)"
# The outbox records (`outbox.locks.RECORDS_CTES` writes the same rows): the key's lock,
# then each record with its drawn `outbox_seq` (in its headers too).
OUTBOX_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))"
OUTBOX_INSERT = """\
INSERT INTO agentrun_kafka_event_outbox
  (id, outbox_seq, event_id, run_id, source_seq, topic, partition_key, value, headers,
   attempt_count, created_at, updated_at)
SELECT r.id, r.outbox_seq, r.event_id, %(run_id)s, r.source_seq, %(topic)s, %(key)s, r.value,
       r.headers || jsonb_build_object('outbox_seq', r.outbox_seq::text), 0, %(now)s, %(now)s
FROM (SELECT r.*, nextval('agentrun_kafka_event_outbox_seq') AS outbox_seq
      FROM jsonb_to_recordset(%(records)s)
        AS r(id text, event_id text, source_seq int, value jsonb, headers jsonb)) r
"""
OUTBOX_TOPIC = "agentrun.events"  # the bench's records are never sent; any topic is fair
OUTBOX_SOURCE = "/agentrun/bench"


def outbox_records(
    run_id: str, tenant: str, session_id: str | None, rows: list[tuple[str, int, Any]], now: Any
) -> tuple[str, list[dict[str, Any]]]:
    """The partition key and the records (CloudEvent value and headers, as
    `outbox.cloudevents` builds them) of the events `rows` (id, seq, payload)."""
    key = f"{tenant}:{session_id or run_id}"
    time = now.isoformat().replace("+00:00", "Z")
    records = [
        {
            "id": new_id("obx"),
            "event_id": event_id,
            "source_seq": seq,
            "value": {
                "specversion": "1.0",
                "id": event_id,
                "source": OUTBOX_SOURCE,
                "type": "agentrun.event.log",
                "subject": run_id,
                "time": time,
                "datacontenttype": "application/json",
                "partitionkey": key,
                "data": {
                    "tenant_id": tenant,
                    "run_id": run_id,
                    "session_id": session_id,
                    "command_id": None,
                    "seq": seq,
                    "type": "log",
                    "payload": item,
                },
            },
            "headers": {
                "content-type": "application/cloudevents+json; charset=UTF-8",
                "event_id": event_id,
                "event_type": "log",
                "run_id": run_id,
                "seq": str(seq),
            },
        }
        for event_id, seq, item in rows
    ]
    return key, records


def raw_append(
    conn: Any,
    run: fixtures.ClaimedRun,
    items: list[dict[str, Any]],
    notify: bool,
    stamp_commit: bool = False,
    outbox: bool = False,
) -> float:
    """One append transaction: the shape of `append_runner_events`, by hand (`outbox`:
    with the outbox records, see the module doc). Returns the `perf_counter()` at which
    COMMIT was sent (for cell 8's wake-up latency)."""
    status, claimed_by, epoch, expires, session_ref, tenant = conn.execute(
        LOCK_RUN, [run.run_id]
    ).fetchone()
    now = datetime.now(UTC)
    if status in ("completed", "failed", "blocked", "cancelled") or claimed_by != run.runner_id:
        raise RuntimeError("raw append: run not claimed by this runner")
    if epoch != run.lease_epoch or expires is None or expires <= now:
        raise RuntimeError("raw append: stale lease")
    last = conn.execute(NEXT_SEQ, [run.run_id]).fetchone()[0]
    params: list[Any] = []
    rows = [(new_id("evt"), last + offset, item) for offset, item in enumerate(items, start=1)]
    for event_id, seq, item in rows:
        params += [event_id, run.run_id, seq, "log", Jsonb(item), now]
    conn.execute(INSERT + ",".join([INSERT_ROW] * len(items)), params)
    session_id = (session_ref or {}).get("session_id")
    if session_id:
        conn.execute(TOUCH_SESSION, [last + len(items), now, now, session_id])
    if outbox:
        key, records = outbox_records(run.run_id, tenant, session_id, rows, now)
        conn.execute(OUTBOX_LOCK, [OUTBOX_TOPIC, key])
        conn.execute(
            OUTBOX_INSERT,
            dict(run_id=run.run_id, topic=OUTBOX_TOPIC, key=key, now=now, records=Jsonb(records)),
        )
    if notify:
        conn.execute(NOTIFY, [RUN_CHANGE_CHANNEL, f"{run.run_id}:{last + len(items)}"])
    committing = _now() if stamp_commit else 0.0
    conn.commit()
    return committing


def raw_side(
    runs: list[fixtures.ClaimedRun], batch: int, notify: bool = True, outbox: bool = False
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    def prepare(index: int) -> Any:
        return fixtures.raw_connect(), index, runs[index % len(runs)]

    def step(state: Any, op: int, result: WorkerResult) -> None:
        conn, writer, run = state
        started = _now()
        items = [payload(writer, op, k) for k in range(batch)]
        raw_append(conn, run, items, notify, outbox=outbox)
        result.latencies_ms.append((_now() - started) * 1000)
        result.done += batch
        result.acknowledged.append(op)

    return prepare, step, lambda state: state[0].close()


def _now() -> float:
    import time

    return time.perf_counter()


# --- the ledger ----------------------------------------------------------------------


def event_ledger(
    runs: list[fixtures.ClaimedRun], results: list[WorkerResult], batch: int
) -> Ledger:
    """Read every event of `runs` back and check seqs, per-writer order and completeness."""
    run_ids = [r.run_id for r in runs]
    with fixtures.raw_connect() as conn:
        rows = conn.execute(
            "SELECT run_id, seq, payload->>'writer', payload->>'n', payload->>'k' "
            "FROM agentrun_events WHERE run_id = ANY(%s) ORDER BY run_id, seq",
            [run_ids],
        ).fetchall()
    ledger = Ledger()
    expected = {
        (w, n, k) for w, res in enumerate(results) for n in res.acknowledged for k in range(batch)
    }
    ledger.expected = len(expected)
    seen: set[tuple[int, int, int]] = set()
    last_of_writer: dict[int, tuple[int, int]] = {}
    prev_seq: dict[str, int] = {}
    gaps = 0
    for run_id, seq, writer, n, k in rows:
        if seq != prev_seq.get(run_id, 0) + 1:
            gaps += 1
        prev_seq[run_id] = seq
        if writer is None:
            continue  # the run's own events (run-claimed)
        item = (int(writer), int(n), int(k))
        if item in seen:
            ledger.duplicates += 1
            continue
        seen.add(item)
        if last_of_writer.get(item[0], (-1, -1)) >= item[1:]:
            ledger.order_violations += 1
        last_of_writer[item[0]] = item[1:]
    ledger.seen = len(seen)
    ledger.lost = len(expected - seen)
    ledger.order_violations += gaps
    if gaps:
        ledger.notes.append(f"{gaps} seq gaps")
    if seen - expected:
        ledger.notes.append(f"{len(seen - expected)} unacknowledged items stored")
    return ledger


# --- figures -------------------------------------------------------------------------


@contextmanager
def notify_off() -> Iterator[None]:
    """The service without `pg_notify` (bench process only): measures what NOTIFY costs."""
    event_service.NOTIFY_ON_APPEND = False
    try:
        yield
    finally:
        event_service.NOTIFY_ON_APPEND = True


def wal_lsn() -> int:
    """The server's current WAL position, in bytes."""
    with fixtures.raw_connect() as conn:
        (lsn,) = conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchall()[0]
        return int(lsn)


def _close_service_connection(_state: Any) -> None:
    """A service writer's end: its thread's Django connection."""
    fixtures.close_django_connection()


def sample(
    kind: str,
    *,
    writers: int,
    batch: int,
    seconds: float,
    notify: bool = True,
    outbox: bool = False,
) -> Callable[[], Sample]:
    """A side as a callable: fresh claimed runs, N writers for `seconds`, then the ledger.
    `outbox`: the reference with its outbox records (the service's are its settings')."""

    def run() -> Sample:
        runs = fixtures.claimed_runs(RUNS)
        if kind == "service":
            prepare, step = service_side(runs, batch)
            finish: Callable[..., Any] = _close_service_connection
        else:
            prepare, step, finish = raw_side(runs, batch, notify, outbox)
        wal_before = wal_lsn()
        if kind == "service" and not notify:
            with notify_off():
                results, elapsed = run_workers(
                    writers, prepare, step, seconds=seconds, finish=finish
                )
        else:
            results, elapsed = run_workers(writers, prepare, step, seconds=seconds, finish=finish)
        wal = wal_lsn() - wal_before
        ledger = event_ledger(runs, results, batch)
        latencies = [x for r in results for x in r.latencies_ms]
        done = sum(r.done for r in results)
        measured = Sample(done, elapsed, ledger, latencies)
        measured.extra["wal_bytes_per_event"] = round(wal / done) if done else None
        return measured

    return run


def outbox_sample(
    *, enabled: bool, writers: int, seconds: float, wake_on_commit: bool = True
) -> Callable[[], Sample]:
    """`wake_on_commit=False`: the deployment whose relay workers LISTEN on
    `agentrun_outbox_committed` (sent by the append after commit), so no Celery publish."""
    inner = sample("service", writers=writers, batch=1, seconds=seconds)

    def run() -> Sample:
        servers = "127.0.0.1:1" if enabled else ""  # recording never connects to Kafka
        with override_settings(
            AGENTRUN_KAFKA_BOOTSTRAP_SERVERS=servers,
            AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT=wake_on_commit,
        ):
            measured = inner()
        with fixtures.raw_connect() as conn:
            records = conn.execute("SELECT count(*) FROM agentrun_kafka_event_outbox").fetchall()[0]
        measured.extra["outbox_rows_total"] = records[0]
        return measured

    return run


def figures(scale: Scale) -> list[Figure]:
    seconds = scale.pick(0.3, 2.0)
    out = []
    for writers in (8, 32):
        out.append(
            Figure(
                f"1.single.{writers}w",
                f"single-event append, {writers} writers on {RUNS} runs",
                "agentrun",
                sample("service", writers=writers, batch=1, seconds=seconds),
                "raw-sql",
                sample("raw", writers=writers, batch=1, seconds=seconds),
                params={"writers": writers, "runs": RUNS, "batch": 1},
                unit="events/s",
                reference_kind="limit",
                goal=(">=", 0.8),  # issue 18
            )
        )
    out.append(
        Figure(
            "1.batch100.8w",
            "batch append (100 events per call), 8 writers",
            "agentrun",
            sample("service", writers=8, batch=100, seconds=seconds),
            "raw-sql",
            sample("raw", writers=8, batch=100, seconds=seconds),
            params={"writers": 8, "runs": RUNS, "batch": 100},
            unit="events/s",
            reference_kind="limit",
            goal=(">=", 0.8),  # issue 18
        )
    )
    out.append(
        Figure(
            "1.batch-vs-single.8w",
            "agentrun batch 100 against agentrun single, events/s",
            "batch100",
            sample("service", writers=8, batch=100, seconds=seconds),
            "single",
            sample("service", writers=8, batch=1, seconds=seconds),
            params={"writers": 8, "runs": RUNS},
            unit="events/s",
            reference_kind="self",
        )
    )
    for writers in (8, 32):
        out.append(
            Figure(
                f"1.notify.{writers}w",
                f"append with pg_notify against without, {writers} writers",
                "with-notify",
                sample("service", writers=writers, batch=1, seconds=seconds),
                "no-notify",
                sample("service", writers=writers, batch=1, seconds=seconds, notify=False),
                params={"writers": writers, "runs": RUNS, "batch": 1},
                unit="events/s",
                reference_kind="self",
            )
        )
        out.append(
            Figure(
                f"1.raw-notify.{writers}w",
                f"raw SQL append with pg_notify against without, {writers} writers",
                "raw-notify",
                sample("raw", writers=writers, batch=1, seconds=seconds),
                "raw-no-notify",
                sample("raw", writers=writers, batch=1, seconds=seconds, notify=False),
                params={"writers": writers, "runs": RUNS, "batch": 1},
                unit="events/s",
                reference_kind="self",
            )
        )
    # Outbox on (the relay woken by a Celery task per commit, or by LISTEN on the
    # notification the append sends after commit) against off.
    for name, label, wake in (
        ("1.outbox.8w", "the Celery wake-up", True),
        ("1.outbox-listen.8w", "LISTEN (no Celery wake-up)", False),
    ):
        out.append(
            Figure(
                name,
                f"append with the Kafka outbox on, relay woken by {label}, against off",
                "outbox-on" if wake else "outbox-listen",
                outbox_sample(enabled=True, writers=8, seconds=seconds, wake_on_commit=wake),
                "outbox-off",
                outbox_sample(enabled=False, writers=8, seconds=seconds),
                params={"writers": 8, "runs": RUNS, "batch": 1},
                unit="events/s",
                reference_kind="self",
                goal=(">=", 0.85),  # issue 18
            )
        )
    out.append(
        Figure(
            "1.raw-outbox.8w",
            "raw SQL append with the outbox records against without, 8 writers",
            "raw-outbox",
            sample("raw", writers=8, batch=1, seconds=seconds, outbox=True),
            "raw-no-outbox",
            sample("raw", writers=8, batch=1, seconds=seconds),
            params={"writers": 8, "runs": RUNS, "batch": 1},
            unit="events/s",
            reference_kind="self",
        )
    )
    return out


def profile_service(scale: Scale) -> dict[str, Any]:
    """py-spy the service side at 8 writers, single appends: where an append's time goes."""
    seconds = scale.pick(3, 8)
    with profiled("append-service-8w", seconds=seconds, focus="service_side") as summary:
        sample("service", writers=8, batch=1, seconds=seconds + 1)()
    print_summary(summary)
    return summary


def query_counts() -> dict[str, Any]:
    run = fixtures.claimed_runs(1)[0]

    def append(batch: int) -> Callable[[], Any]:
        return lambda: append_runner_events(
            run_id=run.run_id,
            runner_id=run.runner_id,
            lease_epoch=run.lease_epoch,
            events=[NewEvent("log", payload(0, 0, k)) for k in range(batch)],
        )

    return {"append_single": captured(append(1)), "append_batch100": captured(append(100))}


def wal_per_event(outcome: Any) -> dict[str, Any]:
    """Each side's median WAL bytes per event (the samples' `wal_bytes_per_event`)."""
    sides = ((outcome.figure.a_name, outcome.a), (outcome.figure.b_name, outcome.b))
    return {
        name: statistics.median(s.extra["wal_bytes_per_event"] or 0 for s in samples)
        for name, samples in sides
        if samples
    }


def statement_wal(repetitions: int = 20) -> dict[str, dict[str, float]]:
    """The WAL the reference's writes of one single append make, each statement on its own
    (`EXPLAIN (ANALYZE, WAL)`: this backend's records only, whatever else the server does;
    median of `repetitions` appends, each committed, as the figures' are): the event
    INSERT, the session UPDATE, the outbox record's INSERT. The run lock, the commit
    record and the occasional sequence record are left out."""
    run = fixtures.claimed_runs(1)[0]
    measured: dict[str, list[tuple[float, float]]] = {"event": [], "session": [], "outbox": []}
    with fixtures.raw_connect() as conn:
        for n in range(repetitions):
            _, _, _, _, _, tenant = conn.execute(LOCK_RUN, [run.run_id]).fetchall()[0]
            (last,) = conn.execute(NEXT_SEQ, [run.run_id]).fetchall()[0]
            now, event_id, item = datetime.now(UTC), new_id("evt"), payload(0, n, 0)
            row = [event_id, run.run_id, last + 1, "log", Jsonb(item), now]
            key, records = outbox_records(
                run.run_id, tenant, run.session_id, [(event_id, last + 1, item)], now
            )
            record = dict(run_id=run.run_id, topic=OUTBOX_TOPIC, key=key, now=now)
            statements: list[tuple[str, str, Any]] = [
                ("event", INSERT + INSERT_ROW, row),
                ("session", TOUCH_SESSION, [last + 1, now, now, run.session_id]),
                ("outbox", OUTBOX_INSERT, {**record, "records": Jsonb(records)}),
            ]
            for name, sql, params in statements:
                (plan,) = conn.execute("EXPLAIN (ANALYZE, WAL, FORMAT JSON) " + sql, params)
                top = plan[0][0]["Plan"]
                measured[name].append((top.get("WAL Records", 0), top.get("WAL Bytes", 0)))
            conn.commit()
    return {
        name: {
            "records": statistics.median(r for r, _ in values),
            "bytes": statistics.median(b for _, b in values),
        }
        for name, values in measured.items()
    }


def outbox_indexes() -> list[str]:
    with fixtures.raw_connect() as conn:
        rows = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'agentrun_kafka_event_outbox'"
            " ORDER BY indexname"
        ).fetchall()
    return [name for (name,) in rows]


def run(scale: Scale) -> CellReport:
    random.seed(1)
    report = CellReport()
    report.data["queries"] = query_counts()
    counts = {name: q["count"] for name, q in report.data["queries"].items()}
    # Django's log, which also lists a BEGIN and a COMMIT psycopg does not send (the round
    # trips are pinned by tests/runs/test_append_statements.py: 3 for a runner's append).
    report.note(f"statements Django logs per call (its BEGIN/COMMIT lines included): {counts}")
    report.outcomes = [compare(figure) for figure in figures(scale)]
    for outcome in report.outcomes:
        if "outbox" in outcome.figure.key:
            wal = wal_per_event(outcome)
            report.note(f"{outcome.figure.key} WAL bytes per event, server-wide: {wal}")
    report.data["statement_wal"] = per_statement = statement_wal()
    report.note(f"WAL per statement of one append, EXPLAIN (ANALYZE, WAL): {per_statement}")
    report.note(f"outbox indexes (an entry each per record): {outbox_indexes()}")
    if scale.profile:
        report.data["profile"] = profile_service(scale)
    return report
