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
- `pgqueuer`: one asyncio QueueManager (asyncpg), `max_concurrent_tasks=N`, batch 10.
- `procrastinate`: one Procrastinate worker (psycopg), `concurrency=N`.

`--latency` makes the handler stamp its start time (cell 4: commit -> handler start).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

from bench import env

PEER_ENTRYPOINT = "bench_noop"


class Journal:
    """Append-only execution log that survives SIGKILL (one flushed line per event)."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "a", buffering=1) if path else None  # noqa: SIM115
        self.lock = threading.Lock()

    def write(self, kind: str, item: str) -> None:
        if self.file is not None:
            with self.lock:
                self.file.write(f"{kind} {item} {time.time():.6f}\n")


JOURNAL = Journal(None)


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def wait_for_go() -> float:
    emit({"ready": True})
    line = sys.stdin.readline()
    if line.strip() != "go":
        sys.exit(0)
    return time.time()


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
        JOURNAL.write("start", request.intent_id)
        if WORK_S:
            time.sleep(WORK_S)
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
                JOURNAL.write("fenced", str(counts.fenced))
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
            JOURNAL.write("start", item)
            if WORK_S:
                await asyncio.sleep(WORK_S)
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
                **RUN_OPTIONS,
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
        JOURNAL.write("start", item)
        if WORK_S:
            import asyncio

            await asyncio.sleep(WORK_S)
        RECORD.append(item)
        if STAMP:
            STARTS.append((item, time.time()))

    return app


RECORD: list[str] = []
WORK_S = 0.0
RUN_OPTIONS: dict[str, Any] = {}  # pgqueuer: the stall (heartbeat) timeout for chaos
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


# --- outbox relays (cell 7) ------------------------------------------------------------


def relay_worker(args: argparse.Namespace) -> dict[str, Any]:
    """agentrun's relay: `outbox.services.relay.run_relay_loop` (what `relay_outbox --loop`
    runs) on a thread, until no record has been undelivered for `--idle` seconds. Its last
    work is the newest `delivered_at` (the settle statement's time)."""
    import django
    import psycopg

    django.setup()
    from django.db import connection

    from outbox.kafka import ensure_topics, outbox_topic
    from outbox.services.relay import RelayResult, run_relay_loop

    connection.ensure_connection()
    ensure_topics({outbox_topic()})
    stop = threading.Event()
    totals: list[RelayResult] = []
    loop = threading.Thread(
        target=lambda: totals.append(run_relay_loop(stop=stop, idle_seconds=0.05))
    )
    with psycopg.connect(env.database_url(), autocommit=True) as watch:
        go = wait_for_go()
        loop.start()
        empty_since = None
        while time.time() < go + args.seconds:
            time.sleep(0.05)
            if watch.execute(RELAY_PENDING).fetchone()[0]:
                empty_since = None
            elif time.time() - (empty_since := empty_since or time.time()) > args.idle:
                break
        stop.set()
        loop.join()
        last = watch.execute(RELAY_LAST).fetchone()[0]
    delivered = totals[0].delivered if totals else 0
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": float(last or 0),
        "delivered": delivered,
    }


RELAY_PENDING = (
    "SELECT EXISTS (SELECT 1 FROM agentrun_kafka_event_outbox WHERE delivered_at IS NULL)"
)
RELAY_LAST = "SELECT extract(epoch FROM max(delivered_at)) FROM agentrun_kafka_event_outbox"


NAIVE_CLAIM = """
SELECT id, topic, partition_key, value::text, headers FROM agentrun_kafka_event_outbox
WHERE delivered_at IS NULL ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
"""


def naive_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The naive relay: SKIP LOCKED a batch by id, produce all, flush, mark sent, commit."""
    import psycopg
    from confluent_kafka import Producer

    producer = Producer(_producer_config())
    with psycopg.connect(env.database_url()) as conn:
        go = wait_for_go()
        last, delivered, failed = 0.0, 0, []
        while time.time() < go + args.seconds:
            with conn.transaction():
                rows = conn.execute(NAIVE_CLAIM, [args.batch]).fetchall()
                if not rows:
                    break
                for _id, topic, key, value, headers in rows:
                    producer.produce(
                        topic,
                        value.encode(),
                        key.encode(),
                        headers=[(k, str(v).encode()) for k, v in headers.items()],
                        on_delivery=lambda err, _msg: failed.append(err) if err else None,
                    )
                producer.flush(30)
                conn.execute(
                    "UPDATE agentrun_kafka_event_outbox SET delivered_at = now()"
                    " WHERE id = ANY(%s)",
                    [[r[0] for r in rows]],
                )
            delivered += len(rows)
            last = time.time()
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": last,
        "delivered": delivered,
        "failed": len(failed),
    }


def producer_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The limit: raw confluent-kafka producing the same messages (read before `go`)."""
    import psycopg
    from confluent_kafka import Producer

    with psycopg.connect(env.database_url()) as conn:
        rows = conn.execute(
            "SELECT topic, partition_key, value::text, headers FROM agentrun_kafka_event_outbox"
            " ORDER BY outbox_seq"
        ).fetchall()
    messages = [
        (t, v.encode(), k.encode(), [(a, str(b).encode()) for a, b in h.items()])
        for t, k, v, h in rows
    ]
    producer = Producer(_producer_config())
    go = wait_for_go()
    failed: list[Any] = []
    for topic, value, key, headers in messages:
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=lambda err, _msg: failed.append(err) if err else None,
                )
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return {
        "executed": [],
        "starts": [],
        "go": go,
        "last_work": time.time(),
        "delivered": len(messages) - len(failed),
        "failed": len(failed),
    }


def _producer_config() -> dict[str, Any]:
    """The same producer settings as agentrun's relay (`outbox.kafka.producer_config`)."""
    return {
        "bootstrap.servers": os.environ["AGENTRUN_KAFKA_BOOTSTRAP_SERVERS"],
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
    }


WORKERS = {
    "agentrun": agentrun_worker,
    "raw": raw_worker,
    "pgqueuer": pgqueuer_worker,
    "procrastinate": procrastinate_worker,
    "relay": relay_worker,
    "naive": naive_worker,
    "producer": producer_worker,
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
    parser.add_argument("--stall-s", type=float, default=0, help="pgqueuer heartbeat timeout")
    args = parser.parse_args(argv)
    global JOURNAL, WORK_S
    JOURNAL, WORK_S = Journal(args.journal), args.work_ms / 1000
    if args.stall_s:
        from datetime import timedelta

        RUN_OPTIONS["heartbeat_timeout"] = timedelta(seconds=args.stall_s)
    env.configure()
    result = WORKERS[args.kind](args)
    result["end"] = time.time()
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
