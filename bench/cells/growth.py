"""Cell 10: growth. Cells 1 and 3 again with 10x the history; small/large should be <= 1.2.

Two databases of the bench server, both migrated: `agentrun_bench` with the small
history and `agentrun_bench_growth` with ten times as much. History = terminal runs, each
with its `turn` command, a `dispatched` intent and 5 events (~250 B payloads), on the
bench backend profile the drain uses:

- full: 100k events / 20k intents small, 1M events / 200k intents large (the issue's 10x);
- quick: a tenth of that.

The large history is written once and kept between bench runs (it is checked by count).
Figures, each interleaved small/large x 3: the single-event append at 8 writers (cell 1's
agentrun side), and the dispatch drain at 2 x 4 (cell 3's agentrun side, with only the
drained rows deleted between repetitions so the history stays). Ratio = small rate /
large rate; the goal is <= 1.1 (issue 18; it was 1.2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import env, queues
from bench.cells.dispatch_drain import drain_sample
from bench.cells.event_append import sample as append_sample
from bench.harness import CellReport, Figure, Sample, Scale, compare

LARGE_DB_SUFFIX = "_growth"
PER_RUN = 5
_PAYLOAD = (
    '{"stream": "stdout", "message": "history: compiling module 42 of 97, 1.3 MB written, '
    'cache warm, no warnings so far. history: compiling module 42 of 97, 1.3 MB written."}'
)


def history_runs(conn: Any) -> int:
    return conn.execute("SELECT count(*) FROM agentrun_runs WHERE id LIKE 'run_h%%'").fetchone()[0]


def ensure_history(runs: int) -> None:
    """Make the current bench database hold exactly `runs` history runs (x5 events)."""
    with env.admin_connect() as conn:
        if history_runs(conn) == runs:
            return
        for table, column in (
            ("agentrun_events", "run_id"),
            ("agentrun_runner_dispatch_intents", "run_id"),
            ("agentrun_commands", "run_id"),
            ("agentrun_runs", "id"),
        ):
            # Names from the constant tuple above, not input.
            conn.execute(f"DELETE FROM {table} WHERE {column} LIKE 'run_h%%'")  # noqa: S608
        conn.execute(
            """
            WITH g AS (SELECT i, lpad(i::text, 9, '0') AS k FROM generate_series(1, %s::int) i),
            r AS (
              INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, provider_id,
                backend_profile, execution_policy, status, terminal_status, created_at,
                updated_at, lease_epoch, cancel_epoch)
              SELECT 'run_h' || k, 'bench', 'bench-project', '{}', 'openai', %s, '{}',
                'completed', 'completed', now() - interval '1 day', now() - interval '1 day',
                1, 0 FROM g RETURNING id
            ), c AS (
              INSERT INTO agentrun_commands (id, run_id, seq, type, payload, payload_hash,
                state, created_at, updated_at, cancel_epoch)
              SELECT 'cmd_h' || k, 'run_h' || k, 1, 'turn', '{}', 'sha256:h', 'completed',
                now() - interval '1 day', now() - interval '1 day', 0 FROM g RETURNING id
            )
            INSERT INTO agentrun_runner_dispatch_intents (id, run_id, command_id, kind, input,
              input_hash, state, attempt_count, runner_job_id, next_attempt_at,
              dispatched_at, created_at, updated_at)
            SELECT 'rdi_h' || k, 'run_h' || k, 'cmd_h' || k, 'runner-job', '{}', 'sha256:h',
              'dispatched', 1, 'rjob_h' || k, now() - interval '1 day', now() - interval '1 day',
              now() - interval '1 day', now() - interval '1 day'
            FROM g
            """,
            [runs, queues.BENCH_PROFILE],
        )
        conn.execute(
            """
            INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at)
            SELECT 'evt_h' || lpad(i::text, 10, '0'),
              'run_h' || lpad((1 + (i - 1) / %s)::text, 9, '0'), 1 + (i - 1) %% %s, 'log',
              %s::jsonb, now() - interval '1 day'
            FROM generate_series(1, %s::int) i
            """,
            [PER_RUN, PER_RUN, _PAYLOAD, runs * PER_RUN],
        )
        conn.execute("VACUUM ANALYZE")


def in_database(name: str, side: Callable[[], Sample]) -> Callable[[], Sample]:
    def run() -> Sample:
        with env.bench_database(name):
            return side()

    return run


def run(scale: Scale) -> CellReport:
    report = CellReport()
    small_db = env.database_name()
    # Quick and full keep separate large databases, so neither rewrites the other's history.
    large_db = small_db + LARGE_DB_SUFFIX + scale.pick("_quick", "")
    small_runs = scale.pick(2_000, 20_000)
    queues.install_peers()
    ensure_history(small_runs)
    env.prepare_database(large_db)
    with env.bench_database(large_db):
        queues.install_peers()
        ensure_history(small_runs * 10)
    report.note(
        f"history: {small_runs:,} runs / {small_runs * PER_RUN:,} events small, "
        f"{small_runs * 10:,} runs / {small_runs * 10 * PER_RUN:,} events large"
    )
    seconds = scale.pick(0.4, 3.0)
    append = append_sample("service", writers=8, batch=1, seconds=seconds)
    report.outcomes.append(
        compare(
            Figure(
                "10.append.8w",
                "single-event append, 8 writers: small vs 10x history",
                "small",
                in_database(small_db, append),
                "10x",
                in_database(large_db, append),
                params={"writers": 8, "history_events_small": small_runs * PER_RUN},
                unit="events/s",
                goal=("<=", 1.1),
                reference_kind="self",
            ),
            scale.heavy_reps,
        )
    )
    n = scale.pick(300, 3_000)
    drain = drain_sample("agentrun", n=n, slots=4, clear=queues.clear_seeded)
    report.outcomes.append(
        compare(
            Figure(
                "10.drain.4",
                f"dispatch drain of {n} intents, 2x4: small vs 10x history",
                "small",
                in_database(small_db, drain),
                "10x",
                in_database(large_db, drain),
                params={"items": n, "history_intents_small": small_runs},
                unit="items/s",
                goal=("<=", 1.1),
                reference_kind="self",
            ),
            scale.heavy_reps,
        )
    )
    return report
