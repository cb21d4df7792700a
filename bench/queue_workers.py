"""The queue workers of cells 3 and 4 (and of cells 5 and 6, chaos and MVCC, which reuse them):
agentrun's `dispatch_batch` with a no-op launcher, the raw-SQL ceiling, and the two peers,
PgQueuer and Procrastinate. Each `*_worker(args)` runs inside a `python -m bench.workers`
process (see that module for the kinds and arguments) and returns its ledger: what it
executed, and when it started and last worked.

Apart from the relay workers of cell 7 (`bench.relay_workers`) because these share one
shape (N slots draining one table of intents or jobs) and none of the Kafka setup.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
from typing import Any

from bench import env, worker_process
from bench.worker_process import PEER_ENTRYPOINT, wait_for_go

# --- agentrun ------------------------------------------------------------------------


class NoopLauncher:
    """Launches nothing; records which intents it was asked for (the execution ledger)."""

    name = "noop"

    def __init__(self, stamp: bool) -> None:
        self.executed: list[str] = []
        self.starts: list[tuple[str, float]] = []
        self.stamp = stamp
        self.lock = threading.Lock()

    def launch(self, request: Any) -> Any:
        from dispatch.launchers import Launched

        now = time.time()
        worker_process.JOURNAL.write("start", request.intent_id)
        if worker_process.WORK_S:
            time.sleep(worker_process.WORK_S)
        with self.lock:
            self.executed.append(request.intent_id)
            if self.stamp:
                self.starts.append((request.intent_id, now))
        return Launched(
            launcher="noop",
            job_name=f"noop-{request.runner_job_id}",
            namespace="bench",
            image="none",
            manager_url="",
            runner_id=request.runner_id,
            source_commit="",
        )

    def abort(self, launched: Any) -> None:
        pass

    def observe(self, job: Any) -> str:
        return "active"


def agentrun_worker(args: argparse.Namespace) -> dict[str, Any]:
    import django

    django.setup()
    from django.db import connection

    from agentrun.leases import lease_owner
    from dispatch.services.launch import dispatch_batch

    launcher = NoopLauncher(args.latency)
    launchers = {"noop": launcher}
    ready = threading.Barrier(args.slots + 1)
    go: list[float] = []
    ends: list[float] = []
    last = [0.0]

    def slot() -> None:
        connection.ensure_connection()
        ready.wait()
        ready.wait()  # released after `go`
        idle_since = None
        while time.time() < go[0] + args.seconds:
            counts = dispatch_batch(
                owner=lease_owner("dispatch"), limit=args.batch, launchers=launchers
            )
            if counts.fenced:
                worker_process.JOURNAL.write("fenced", str(counts.fenced))
            if counts.claimed:
                idle_since = None
                last[0] = max(last[0], time.time())
                continue
            idle_since = idle_since or time.time()
            producing = args.latency and time.time() < go[0] + args.until
            if not producing and time.time() - idle_since > args.idle:
                break
            time.sleep(0.005 if args.latency else 0.02)
        ends.append(time.time())
        connection.close()

    threads = [threading.Thread(target=slot) for _ in range(args.slots)]
    for thread in threads:
        thread.start()
    ready.wait()
    go.append(wait_for_go())
    ready.wait()
    for thread in threads:
        thread.join()
    return {
        "executed": launcher.executed,
        "starts": launcher.starts,
        "go": go[0],
        "last_work": last[0],
    }


# --- raw SQL ceiling -----------------------------------------------------------------

RAW_CLAIM = """
WITH due AS (
    SELECT id FROM agentrun_runner_dispatch_intents
    WHERE state IN ('pending', 'retry', 'dispatching') AND next_attempt_at <= now()
      AND (state <> 'dispatching' OR lease_expires_at <= now())
    ORDER BY next_attempt_at, created_at
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
UPDATE agentrun_runner_dispatch_intents i
SET state = 'dispatching', attempt_count = i.attempt_count + 1, lease_owner = %s,
    lease_expires_at = now() + interval '60 seconds', updated_at = now()
FROM due WHERE i.id = due.id
RETURNING i.id, i.attempt_count
"""
RAW_COMPLETE = """
UPDATE agentrun_runner_dispatch_intents i
SET state = 'dispatched', dispatch_outcome = 'launched', lease_owner = NULL,
    lease_expires_at = NULL, dispatched_at = now(), updated_at = now()
FROM unnest(%s::text[], %s::int[]) AS c(id, attempt)
WHERE i.id = c.id AND i.attempt_count = c.attempt AND i.lease_owner = %s
  AND i.state = 'dispatching'
"""


def raw_worker(args: argparse.Namespace) -> dict[str, Any]:
    import psycopg

    executed: list[str] = []
    starts: list[tuple[str, float]] = []
    lock = threading.Lock()
    ready = threading.Barrier(args.slots + 1)
    go: list[float] = []
    last = [0.0]

    def slot(index: int) -> None:
        owner = f"raw:{os.getpid()}:{index}"
        with psycopg.connect(env.database_url()) as conn:
            ready.wait()
            ready.wait()
            idle_since = None
            while time.time() < go[0] + args.seconds:
                with conn.transaction():
                    rows = conn.execute(RAW_CLAIM, [args.batch, owner]).fetchall()
                if not rows:
                    idle_since = idle_since or time.time()
                    producing = args.latency and time.time() < go[0] + args.until
                    if not producing and time.time() - idle_since > args.idle:
                        break
                    time.sleep(0.005 if args.latency else 0.02)
                    continue
                idle_since = None
                now = time.time()
                with lock:
                    executed.extend(r[0] for r in rows)
                    if args.latency:
                        starts.extend((r[0], now) for r in rows)
                with conn.transaction():
                    conn.execute(RAW_COMPLETE, [[r[0] for r in rows], [r[1] for r in rows], owner])
                last[0] = max(last[0], time.time())

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(args.slots)]
    for thread in threads:
        thread.start()
    ready.wait()
    go.append(wait_for_go())
    ready.wait()
    for thread in threads:
        thread.join()
    return {"executed": executed, "starts": starts, "go": go[0], "last_work": last[0]}


# --- peers ---------------------------------------------------------------------------


def pgqueuer_worker(args: argparse.Namespace) -> dict[str, Any]:
    import asyncio
    from datetime import timedelta

    import asyncpg
    from pgqueuer import QueueManager
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries
    from pgqueuer.types import QueueExecutionMode

    executed: list[str] = []
    starts: list[tuple[str, float]] = []

    async def main() -> float:
        conn = await asyncpg.connect(env.database_url())
        qm = QueueManager(Queries(AsyncpgDriver(conn)))

        @qm.entrypoint(PEER_ENTRYPOINT)
        async def noop(job: Any) -> None:
            item = job.payload.decode()
            worker_process.JOURNAL.write("start", item)
            if worker_process.WORK_S:
                await asyncio.sleep(worker_process.WORK_S)
            executed.append(item)
            if args.latency:
                starts.append((item, time.time()))

        go = await asyncio.get_running_loop().run_in_executor(None, wait_for_go)
        mode = QueueExecutionMode.continuous if args.latency else QueueExecutionMode.drain
        runner = asyncio.create_task(
            qm.run(
                batch_size=args.batch,
                mode=mode,
                max_concurrent_tasks=args.slots * args.batch,
                dequeue_timeout=timedelta(seconds=0.5),
                **worker_process.RUN_OPTIONS,
            )
        )
        await asyncio.wait([runner], timeout=args.seconds)
        qm.shutdown.set()
        await runner
        await conn.close()
        return go

    go = asyncio.run(main())
    return {"executed": executed, "starts": starts, "go": go}


def procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=env.database_url()),
    )

    @app.task(name=PEER_ENTRYPOINT, queue="bench")
    async def noop(item: str) -> None:
        worker_process.JOURNAL.write("start", item)
        if worker_process.WORK_S:
            import asyncio

            await asyncio.sleep(worker_process.WORK_S)
        RECORD.append(item)
        if STAMP:
            STARTS.append((item, time.time()))

    return app


RECORD: list[str] = []
STARTS: list[tuple[str, float]] = []
STAMP = False


def procrastinate_worker(args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    global STAMP
    STAMP = args.latency
    app = procrastinate_app()

    async def main() -> float:
        async with app.open_async():
            go = await asyncio.get_running_loop().run_in_executor(None, wait_for_go)
            worker = asyncio.create_task(
                app.run_worker_async(
                    queues=["bench"],
                    concurrency=args.slots,
                    wait=args.latency,
                    install_signal_handlers=False,
                    listen_notify=True,
                )
            )
            done, _ = await asyncio.wait([worker], timeout=args.seconds)
            if not done:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await worker
            return go

    go = asyncio.run(main())
    return {"executed": RECORD, "starts": STARTS, "go": go}
