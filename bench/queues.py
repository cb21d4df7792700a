"""Seeding and running the queue cells' worker processes (cells 3, 4, 5).

`seed(kind, n)` puts n no-op items in a kind's queue (untimed): agentrun dispatch intents
(runs, `turn` commands and intents written in bulk SQL, on a bench backend profile with no
capacity limit and the no-op launcher), PgQueuer jobs, Procrastinate jobs. `Pool` starts
worker processes (`bench.workers`), releases them together and collects their ledgers.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench import env
from bench.harness import Ledger

BENCH_PROFILE = "bench-noop"
# Extra unlimited profiles, to show what the per-profile runner-create fence costs.
BENCH_PROFILES = [BENCH_PROFILE] + [f"bench-noop-{i}" for i in range(1, 8)]
PEER_TABLES = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics", "pgqueuer_schedules")


def install_peers() -> None:
    """PgQueuer's and Procrastinate's schemas in the bench database (once)."""
    with env.admin_connect() as conn:
        have_pgq = conn.execute("SELECT to_regclass('pgqueuer') IS NOT NULL").fetchone()[0]
        have_pro = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL").fetchone()[
            0
        ]
        for profile in BENCH_PROFILES:
            conn.execute(
                "INSERT INTO agentrun_backends (profile, capabilities, capacity, health,"
                " policy_ceiling, updated_at) VALUES (%s, '{}', '{}', '{}', '{}', now())"
                " ON CONFLICT (profile) DO NOTHING",
                [profile],
            )
    if not have_pgq:
        asyncio.run(_install_pgqueuer())
    if not have_pro:
        from bench.workers import procrastinate_app

        app = procrastinate_app()
        with app.open():
            app.schema_manager.apply_schema()


async def _install_pgqueuer() -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(env.database_url())
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


def clear_queues() -> None:
    env.reset_tables()
    with env.admin_connect() as conn:
        existing = [
            t
            for t in (*PEER_TABLES, "procrastinate_jobs", "procrastinate_events")
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [t]).fetchone()[0]
        ]
        if existing:
            conn.execute("TRUNCATE " + ", ".join(existing) + " CASCADE")
    set_bench_capacity({})


def set_bench_capacity(capacity: dict[str, int]) -> None:
    """The bench profile's `capacity` (`{}`: no limit, so no runner-create fence)."""
    with env.admin_connect() as conn:
        conn.execute(
            "INSERT INTO agentrun_backends (profile, capabilities, capacity, health,"
            " policy_ceiling, updated_at) VALUES (%s, '{}', %s, '{}', '{}', now())"
            " ON CONFLICT (profile) DO UPDATE SET capacity = excluded.capacity",
            [BENCH_PROFILE, json.dumps(capacity)],
        )


SEEDED_TABLES = (  # child tables first; the seeded rows' ids all start with "<prefix>_b"
    ("agentrun_events", "run_id", "run_b%"),
    ("agentrun_runner_jobs", "run_id", "run_b%"),
    ("agentrun_api_keys", "run_id", "run_b%"),
    ("agentrun_runner_dispatch_intents", "id", "rdi_b%"),
    ("agentrun_leases", "run_id", "run_b%"),
    ("agentrun_commands", "id", "cmd_b%"),
    ("agentrun_runs", "id", "run_b%"),
)


def clear_seeded() -> None:
    """Delete only what `seed_intents` made (and what dispatching it wrote), keeping the
    rest of the database (cell 10's history), then vacuum those tables."""
    with env.admin_connect() as conn:
        for table, column, pattern in SEEDED_TABLES:
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()[0]:
                # Names from the constant SEEDED_TABLES, not input.
                conn.execute(f"DELETE FROM {table} WHERE {column} LIKE %s", [pattern])  # noqa: S608
        for table, _, _ in SEEDED_TABLES:
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", [table]).fetchone()[0]:
                conn.execute(f"VACUUM ANALYZE {table}")


def seed(kind: str, n: int, *, start: int = 0, profiles: int = 1) -> list[str]:
    """Enqueue n items numbered start..start+n-1; return their ids (the ledger's keys)."""
    if kind in ("agentrun", "raw", "writeset", "writeset-steps", "celery"):
        return seed_intents(n, start=start, profiles=profiles)
    items = [str(i) for i in range(start, start + n)]
    if kind == "pgqueuer":
        asyncio.run(_seed_pgqueuer(items))
    elif kind == "procrastinate":
        _seed_procrastinate(items)
    return items


def seed_intents(n: int, *, start: int = 0, profiles: int = 1) -> list[str]:
    """n pending intents of n pending runs (one `turn` command each), in bulk SQL; runs
    cycle over `profiles` unlimited bench backend profiles."""
    with env.admin_connect() as conn:
        conn.execute(
            """
            WITH g AS (
              SELECT i, lpad(i::text, 9, '0') AS k FROM generate_series(%s::int, %s::int) i
            ),
            runs AS (
              INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, provider_id,
                backend_profile, execution_policy, status, created_at, updated_at,
                lease_epoch, cancel_epoch)
              SELECT 'run_b' || k, 'bench', 'bench-project', '{}', 'openai',
                (%s::text[])[1 + i %% %s], '{}', 'pending', now(), now(), 0, 0
              FROM g RETURNING id
            ), cmds AS (
              INSERT INTO agentrun_commands (id, run_id, seq, type, payload, payload_hash, state,
                created_at, updated_at, cancel_epoch)
              SELECT 'cmd_b' || k, 'run_b' || k, 1, 'turn', '{}', 'sha256:bench', 'pending',
                now(), now(), 0 FROM g RETURNING id
            )
            INSERT INTO agentrun_runner_dispatch_intents (id, run_id, command_id, kind, input,
              input_hash, state, attempt_count, runner_job_id, next_attempt_at, created_at,
              updated_at)
            SELECT 'rdi_b' || k, 'run_b' || k, 'cmd_b' || k, 'runner-job',
              '{"launch_profile": "noop"}', 'sha256:bench', 'pending', 0, 'rjob_b' || k,
              now(), now() + (i * interval '1 microsecond'), now()
            FROM g
            """,
            [start, start + n - 1, BENCH_PROFILES[:profiles], profiles],
        )
    return [f"rdi_b{i:09d}" for i in range(start, start + n)]


async def _seed_pgqueuer(items: list[str]) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    from bench.workers import PEER_ENTRYPOINT

    conn = await asyncpg.connect(env.database_url())
    try:
        queries = Queries(AsyncpgDriver(conn))
        for chunk in range(0, len(items), 5000):
            part = items[chunk : chunk + 5000]
            await queries.enqueue(
                [PEER_ENTRYPOINT] * len(part), [i.encode() for i in part], [0] * len(part)
            )
    finally:
        await conn.close()


def _seed_procrastinate(items: list[str]) -> None:
    from bench.workers import PEER_ENTRYPOINT, procrastinate_app

    app = procrastinate_app()
    with app.open():
        task = app.tasks[PEER_ENTRYPOINT]
        for chunk in range(0, len(items), 5000):
            task.batch_defer(*({"item": i} for i in items[chunk : chunk + 5000]))


@dataclass
class PoolResult:
    executed: list[str]
    starts: list[tuple[str, float]]
    go: float
    end: float
    returncodes: list[int] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)


class Pool:
    """`processes` worker processes of one kind, released together with `go`."""

    def __init__(self, kind: str, *, processes: int, slots: int, batch: int, **extra: Any):
        self.kind = kind
        command = [
            sys.executable,
            "-m",
            "bench.workers",
            kind,
            "--slots",
            str(slots),
            "--batch",
            str(batch),
        ]
        for name, value in extra.items():
            flag = "--" + name.replace("_", "-")
            command += [flag] if value is True else [flag, str(value)]
        # Workers' own logs (peers log every refused late finish) go to a file, not the report.
        self.log = (env.RESULTS / "workers.log").open("a")
        self.procs = [
            subprocess.Popen(
                command,
                cwd=env.ROOT,
                env=dict(os.environ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                text=True,
            )
            for _ in range(processes)
        ]
        for proc in self.procs:
            line = proc.stdout.readline() if proc.stdout else ""
            if '"ready"' not in line:
                self.kill()
                raise RuntimeError(f"{kind} worker did not start: {line!r}")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def go(self) -> float:
        started = time.time()
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        return started

    def collect(self, timeout: float = 900) -> PoolResult:
        executed: list[str] = []
        starts: list[tuple[str, float]] = []
        ends, codes, reports = [], [], []
        for proc in self.procs:
            out, _ = proc.communicate(timeout=timeout)
            codes.append(proc.returncode)
            lines = [x for x in (out or "").splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                continue  # killed on purpose (chaos) or crashed: its ledger is the database's
            result = json.loads(lines[-1])
            reports.append({k: v for k, v in result.items() if k not in ("executed", "starts")})
            executed += result["executed"]
            starts += [tuple(s) for s in result["starts"]]
            ends.append(result.get("last_work") or result["end"])
        end = max(ends) if ends else time.time()
        return PoolResult(executed, starts, 0.0, end, codes, reports)

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.log.close()


def execution_ledger(expected: list[str], executed: list[str]) -> Ledger:
    seen = set(executed)
    want = set(expected)
    return Ledger(
        expected=len(want),
        seen=len(seen & want),
        duplicates=len(executed) - len(seen),
        lost=len(want - seen),
    )


def intent_ledger(expected: list[str]) -> dict[str, int]:
    """What agentrun's database says about the intents: dispatched, runner jobs, events."""
    with env.admin_connect() as conn:
        states = dict(
            conn.execute(
                "SELECT state, count(*) FROM agentrun_runner_dispatch_intents GROUP BY 1"
            ).fetchall()
        )
        jobs = conn.execute("SELECT count(*) FROM agentrun_runner_jobs").fetchone()[0]
        extra_jobs = conn.execute(
            "SELECT count(*) FROM (SELECT run_id FROM agentrun_runner_jobs GROUP BY run_id"
            " HAVING count(*) > 1) d"
        ).fetchone()[0]
    return {"states": states, "runner_jobs": jobs, "runs_with_two_jobs": extra_jobs}


# --- what a drain writes ---------------------------------------------------------------


@dataclass(frozen=True)
class WriteMark:
    """The bench database's counters at one moment: the WAL flush position and, summed
    over its tables, the rows inserted, updated (of which HOT) and deleted."""

    lsn: str
    tuples: dict[str, int]


_TUPLES_SQL = """
SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0),
       coalesce(sum(n_tup_hot_upd), 0), coalesce(sum(n_tup_del), 0)
FROM pg_stat_user_tables
"""

# The WAL between two marks is the whole cluster's (other databases write meanwhile), so
# only this database's records count: those with a block of one of its relations (counted
# to the relation's table, an index's to its table), and the commit records of the
# transactions that wrote them (pg_walinspect, PostgreSQL 15). One pass over the span.
_WAL_SQL = """
WITH w AS (
  SELECT xid::text AS x, resource_manager, record_length, fpi_length, block_ref,
         block_ref LIKE %(rel)s AS here
  FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
),
ours AS (SELECT DISTINCT x FROM w WHERE here AND x <> '0'),
r AS (
  SELECT here, record_length, fpi_length,
         CASE WHEN here THEN pg_filenode_relation(
           0, (regexp_match(block_ref, 'rel \\d+/\\d+/(\\d+)'))[1]::oid) END AS rel
  FROM w
  WHERE here OR (resource_manager = 'Transaction' AND x IN (SELECT x FROM ours))
)
SELECT CASE WHEN NOT r.here THEN '(commits)' ELSE coalesce(t.relname, c.relname, '?') END,
       count(*), sum(r.record_length), sum(r.fpi_length)
FROM r LEFT JOIN pg_class c ON c.oid = r.rel
LEFT JOIN pg_index i ON i.indexrelid = r.rel LEFT JOIN pg_class t ON t.oid = i.indrelid
GROUP BY 1 ORDER BY 3 DESC
"""


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children that have exited."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used so far (/proc, Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_mark() -> WriteMark:
    """Mark the counters (read on a new connection: statistics are a per-transaction
    snapshot, and a worker's counts reach them when its backend exits or flushes)."""
    with env.admin_connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        ins, upd, hot, dele = conn.execute(_TUPLES_SQL).fetchone()
        lsn = conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]
    return WriteMark(lsn, {"ins": int(ins), "upd": int(upd), "hot": int(hot), "del": int(dele)})


def writes_between(start: WriteMark, items: int) -> dict[str, Any]:
    """Per item, what this database wrote since `start`: rows inserted / updated (HOT) /
    deleted, WAL records and bytes (and of those, full-page images; and the record bytes
    by table, its indexes' included, in `wal_by_table`). Waits a moment for
    the workers' backends, which flush their table counts when they exit."""
    time.sleep(1.0)
    end = write_mark()
    per = max(items, 1)
    out: dict[str, Any] = {
        name: round((end.tuples[name] - start.tuples[name]) / per, 2) for name in end.tuples
    }
    try:
        with env.admin_connect() as conn:
            oid = conn.execute(
                "SELECT oid FROM pg_database WHERE datname = current_database()"
            ).fetchone()[0]
            span = {"start": start.lsn, "end": end.lsn, "rel": f"%/{oid}/%"}
            by_table = conn.execute(_WAL_SQL, span).fetchall()
    except psycopg.Error as error:  # e.g. a checkpoint recycled the span's first segment
        return {**out, "wal_error": str(error).splitlines()[0]}
    out |= {
        "wal_records": round(sum(row[1] for row in by_table) / per, 2),
        "wal_bytes": round(sum(row[2] for row in by_table) / per, 1),
        "wal_fpi_bytes": round(sum(row[3] for row in by_table) / per, 1),
    }
    return {**out, "wal_by_table": {row[0]: round(row[2] / per, 1) for row in by_table}}
