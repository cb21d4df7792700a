"""Where a relayed record's CPU goes, phase by phase: `python -m bench.relay_split`.

Cell 7 times whole relays on two shared cores; this splits one record's CPU between its
phases, each run alone on one connection (no second thread, no Kafka: every record counts
as acknowledged), so the figures do not depend on how the phases overlap:
- agentrun: `claim_outbox_records` (one claim of 1,000) and `settle_outbox_records` (all
  acknowledged), batch after batch until the outbox is drained;
- claim-read: the claim's own CTEs (skip scan over the keys' heads, `FOR UPDATE` of the
  heads, each key's prefix) with a `SELECT` of the picked rows instead of the lease
  `UPDATE`, then raw-minimal's mark: what a claim would still cost if it leased keys rather
  than records (its per-key lease writes not included);
- raw-minimal: `bench.relay_workers`' keyset read and its `UPDATE … SET delivered_at` by
  ctid (no lease, no fencing: a bound, not a relay).
Each on n fresh records over cell 7's 500 keys (`bench.outbox_fixtures.seed_records`).
PostgreSQL's CPU is the backend's (`/proc/<pid>/stat`, 10 ms ticks summed over the
batches), Python's this process's (`os.times`). Prints microseconds per record.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from bench import env

TOPIC = "bench.split"


def python_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


class Meter:
    """Accumulates backend and Python CPU per phase."""

    def __init__(self, backend_pid: int) -> None:
        self.backend_pid = backend_pid
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str, work: Callable[..., Any], *args: Any) -> Any:
        from bench.proc_cpu import proc_cpu_s

        pg, py = proc_cpu_s(self.backend_pid) or 0.0, python_cpu_s()
        result = work(*args)
        pg_after = proc_cpu_s(self.backend_pid) or 0.0
        self.seconds[f"{phase}_pg"] = self.seconds.get(f"{phase}_pg", 0.0) + pg_after - pg
        self.seconds[f"{phase}_py"] = self.seconds.get(f"{phase}_py", 0.0) + python_cpu_s() - py
        return result

    def per_record_us(self, records: int) -> dict[str, float]:
        return {k: round(v * 1e6 / max(records, 1), 1) for k, v in self.seconds.items()}


def django_backend_pid() -> int:
    from agentrun.raw_sql import fetch_rows

    return int(fetch_rows("SELECT pg_backend_pid()", {})[0][0])


def agentrun_phases(batch: int) -> tuple[int, Meter]:
    from outbox.services.relay import claim_outbox_records, settle_outbox_records

    def settle(claims: list[Any]) -> Any:
        return settle_outbox_records(claims=claims, outcomes=[None] * len(claims))

    meter, total = Meter(django_backend_pid()), 0
    while claims := meter(
        "claim",
        lambda: claim_outbox_records(owner="split:0:relay", limit=batch, lease_ms=60_000),
    ):
        meter("settle", settle, claims)
        total += len(claims)
    return total, meter


def claim_read_phases(batch: int) -> tuple[int, Meter]:
    from django.db import transaction

    from agentrun.raw_sql import fetch_rows
    from bench.relay_workers import RAW_MINIMAL_MARK
    from outbox.locks import _CLAIM_SQL, RECORDS_PER_KEY

    ctes = _CLAIM_SQL.partition("UPDATE agentrun_kafka_event_outbox o\nSET attempt_count")[0]
    read = ctes + (  # noqa: S608 (fixed text: the claim's CTEs and a SELECT)
        "SELECT o.ctid::text, o.id, o.event_id, o.run_id, o.topic, o.partition_key,"
        " o.outbox_seq, o.attempt_count, o.lease_owner, o.value, o.headers, picked.key_offset"
        " FROM picked JOIN agentrun_kafka_event_outbox o ON o.ctid = picked.row_ctid"
    )
    params = {"limit": batch, "per_key": RECORDS_PER_KEY, "owner": "-", "lease_ms": 0}
    mark = RAW_MINIMAL_MARK.replace("%s", "%(ctids)s") + " RETURNING 1"

    def claim_read() -> list[tuple[Any, ...]]:
        with transaction.atomic():
            return fetch_rows(read, params)

    meter, total = Meter(django_backend_pid()), 0
    while rows := meter("claim_read", claim_read):
        meter("mark", fetch_rows, mark, {"ctids": [row[0] for row in rows]})
        total += len(rows)
    return total, meter


def raw_minimal_phases(batch: int) -> tuple[int, Meter]:
    import psycopg

    from bench.relay_workers import RAW_MINIMAL_MARK, RAW_MINIMAL_READ

    with psycopg.connect(env.database_url(), autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        meter, total, after = Meter(int(row[0])), 0, ("", "", -1)

        def read(after: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return conn.execute(RAW_MINIMAL_READ, [*after, batch]).fetchall()

        while rows := meter("read", read, after):
            after = rows[-1][1:4]
            meter("mark", conn.execute, RAW_MINIMAL_MARK, [[r[0] for r in rows]])
            total += len(rows)
    return total, meter


SIDES = {
    "agentrun": agentrun_phases,
    "claim-read": claim_read_phases,
    "raw-minimal": raw_minimal_phases,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_split")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=2, help="each side, interleaved")
    args = parser.parse_args(argv)
    env.configure()
    env.prepare_database()
    import django

    django.setup()
    from bench.outbox_fixtures import seed_records, start_broker, template_record

    env.reset_tables()
    env.vacuum_analyze()
    broker = start_broker()  # only for the template record, written with the outbox on
    try:
        template = template_record(broker.bootstrap_servers)
    finally:
        broker.stop()
    for rep in range(args.reps):
        for name, side in SIDES.items():
            seed_records(template, args.records, TOPIC)
            total, meter = side(args.batch)
            load = os.getloadavg()[0]
            print(
                f"{name} #{rep + 1} ({total} records, load {load:.1f}): "
                f"{meter.per_record_us(total)} us per record",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
