"""Worker processes for the queue cells (3, 4): `python -m bench.workers KIND --slots N`.

Each process prints `ready` once it is set up (Django imported, connections open), waits
for `go` on stdin, works until its queue is drained (or `--seconds` pass), and prints one
JSON line: what it executed (for the ledger) and when it started and finished (wall
clock, `time.time()`, comparable across processes). Kinds:

- `agentrun`: N threads, each looping `dispatch.services.launch.dispatch_batch` with a
  no-op launcher (the real claim, capacity check, runner key, fenced complete, event).
- `raw`: N threads of the raw-SQL ceiling: claim `--batch` intents with one
  `UPDATE … FOR UPDATE SKIP LOCKED` statement, then complete them fenced by
  (owner, attempt) in a second transaction.
- `writeset`: N threads of cell 3's "raw-writeset" ceiling, agentrun's own durable
  write set per intent in hand-written psycopg (`bench.writeset` says what it writes);
  `writeset-steps`: the same, one round trip per statement.
- `pgqueuer`: one asyncio QueueManager (asyncpg), `max_concurrent_tasks=N`, batch 10.
- `procrastinate`: one Procrastinate worker (psycopg), `concurrency=N`.

`--latency` makes the handler stamp its start time (cell 4: commit -> handler start).

The workers themselves live in `bench.queue_workers` (agentrun, raw, pgqueuer,
procrastinate) and `bench.relay_workers` (relay, naive, raw-minimal, producer); the ready/go/result
protocol, the journal and the per-process settings in `bench.worker_process`. This module
is the entry point and keeps the names other bench modules import from it.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench import env, worker_process
from bench.queue_workers import (
    NoopLauncher,
    agentrun_worker,
    pgqueuer_worker,
    procrastinate_app,
    procrastinate_worker,
    raw_worker,
)
from bench.relay_workers import naive_worker, producer_worker, raw_minimal_worker, relay_worker
from bench.worker_process import PEER_ENTRYPOINT, Journal, emit
from bench.writeset import writeset_steps_worker, writeset_worker

# Imported from here by the cells, `bench.queues` and `bench.launchers`.
__all__ = ["PEER_ENTRYPOINT", "Journal", "NoopLauncher", "main", "procrastinate_app"]

WORKERS = {
    "agentrun": agentrun_worker,
    "raw": raw_worker,
    "writeset": writeset_worker,
    "writeset-steps": writeset_steps_worker,
    "pgqueuer": pgqueuer_worker,
    "procrastinate": procrastinate_worker,
    "relay": relay_worker,
    "naive": naive_worker,
    "producer": producer_worker,
    "raw-minimal": raw_minimal_worker,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workers")
    parser.add_argument("kind", choices=sorted(WORKERS))
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--idle", type=float, default=0.5, help="drained after this idle")
    parser.add_argument("--latency", action="store_true")
    parser.add_argument("--until", type=float, default=0, help="latency: producing this long")
    parser.add_argument("--work-ms", type=float, default=0, help="each item takes this long")
    parser.add_argument("--journal", help="append executions here (survives SIGKILL)")
    parser.add_argument(
        "--unprepared", action="store_true", help="writeset: prepare nothing (plan per call)"
    )
    parser.add_argument("--stall-s", type=float, default=0, help="pgqueuer heartbeat timeout")
    args = parser.parse_args(argv)
    # Set on `worker_process`, where the worker functions read them (this module is __main__).
    worker_process.JOURNAL = Journal(args.journal)
    worker_process.WORK_S = args.work_ms / 1000
    if args.stall_s:
        from datetime import timedelta

        worker_process.RUN_OPTIONS["heartbeat_timeout"] = timedelta(seconds=args.stall_s)
    env.configure()
    result = WORKERS[args.kind](args)
    result["end"] = time.time()
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
