"""Cell 3's "raw-writeset" ceiling: agentrun's own durable write set per dispatched intent,
hand-written in psycopg (no Django), in the fewest round trips raw SQL allows.

What a batch of up to 10 intents writes and locks, as `dispatch.services.launch
.dispatch_batch` does on an unlimited profile with a launcher that starts nothing:

1. the claim, one transaction of two statements in one pipeline (round trip 1), as
   `dispatch.locks.claim_due_intents_with_keys`: the rescue of expired leases, then the
   due intents of live runs and commands, oldest due
   first, `FOR UPDATE OF i SKIP LOCKED`; each gets `state = dispatching`, a lease (owner,
   expiry) and `attempt_count + 1`; the profile's `capacity` is read; one run-scoped
   runner key row per claimed intent is inserted (a fresh id, prefix and SHA-256 digest of
   a fresh 256-bit secret, minted client side as `agentrun.auth.mint_key` does, ten per
   batch whether claimed or not);
2. the "launch": the claim's runner id and job name (the no-op launcher of the agentrun
   side records the intent in the same execution ledger);
3. the settle, one pipelined round trip (round trip 2): BEGIN; lock the batch's runs, in
   id order (`SELECT … FOR UPDATE`); lock their commands, in (run, seq) order; then one
   statement: the intents' compare-and-set UPDATE on the claim token (state
   `dispatching`, owner, attempt) that also checks run and command are not terminal (the
   fence), setting `dispatched`, outcome, job and runner ids, clearing the lease and the
   error; INSERT of the runner job of each intent written (`ON CONFLICT (run_id,
   idempotency_key) DO NOTHING`, with its payload hash and result); each run's last seq
   read from the (run, seq) index and the `backend_status {phase: runner-dispatched}`
   event inserted with the next seq (the same eleven-field payload); the runs' sessions'
   `last_event_seq` / activity touched; the webhook-endpoint probe of `runs.sql`; COMMIT;
   then the `agentrun_run_change` NOTIFY per run (`synchronous_commit` off, its own
   autocommitted statement, as `runs.sql.notify_runs_changed`), in the same pipeline: its
   payloads are read back by the events' ids (one per event, and each run has one here),
   since the client has not seen the seqs yet.

So the same rows (per intent: the intent written twice, a key, a runner job, an event;
the run and command rows locked) and the same locks in the same order, with the same
indexes and constraints (it runs on agentrun's schema). Per batch 2 round trips, where
agentrun's path is 8 (claim 1; settle BEGIN, run locks, command locks, intents + jobs,
events + sessions, COMMIT, NOTIFY). `writeset_steps_worker` ("raw-writeset-steps") runs
the same statements unpipelined, one round trip each (7 per batch): against it, what
is left of agentrun's gap is its Python side alone.

What it leaves out: Django (its cursor wrapper, `transaction.atomic`, model instances:
agentrun builds a `Run` and a `Command` per locked row, an `IntentClaim`, an `ApiKey` and
`IssuedKey` per key, a `RunnerJobSpec`, `DispatchedJob`, `Event`, `RunnerDispatchIntent`
per written intent); the redaction of the job result and event payload
(`agentrun.redaction.redact_json`); the Python-side refusal checks and the fenced path (a
claim refused here is simply not written: no `cancelled` fence, no key revoke, no abort;
the bench never refuses one); the capacity decision (the claim reads `capacity`, nothing
is limited); the metrics counters; the on-commit hooks. It is an upper bound on what
agentrun's dispatch can do with this write set on this machine, not a design to ship: the
statements' fence lives in SQL, and the pipeline sends the settle's write before the
client has seen the locks' rows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import threading
import time
from typing import Any

from agentrun.hashing import secret_digest, stable_hash
from agentrun.ids import new_id
from agentrun.prepared_sql import GENERIC_PLANS, INDEX_PLANS
from bench import env, worker_process
from bench.worker_process import wait_for_go

LEASE_MS = 60_000
KEY_TTL_S = 3600

# The claim's rescue, as `dispatch.locks`': expired leases given back before the claim.
RESCUE_SQL = """
UPDATE agentrun_runner_dispatch_intents i
SET state = 'retry', lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
FROM (
    SELECT id FROM agentrun_runner_dispatch_intents
    WHERE state = 'dispatching' AND lease_expires_at <= now()
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) expired
WHERE i.id = expired.id
RETURNING i.id
"""

CLAIM_SQL = """
WITH due AS (
    SELECT i.id
    FROM agentrun_runner_dispatch_intents i
    JOIN agentrun_runs r ON r.id = i.run_id
    JOIN agentrun_commands c ON c.id = i.command_id
    WHERE i.state IN ('pending', 'retry')
      AND i.next_attempt_at <= now()
      AND r.status NOT IN ('completed', 'failed', 'blocked', 'cancelled')
      AND c.state NOT IN ('completed', 'failed', 'cancelled')
    ORDER BY i.next_attempt_at, i.created_at
    LIMIT %(limit)s
    FOR UPDATE OF i SKIP LOCKED
),
claimed AS (
    UPDATE agentrun_runner_dispatch_intents i
    SET state = 'dispatching', attempt_count = i.attempt_count + 1, lease_owner = %(owner)s,
        lease_expires_at = now() + %(lease_ms)s * interval '1 millisecond', updated_at = now()
    FROM due, agentrun_runs r
    WHERE i.id = due.id AND r.id = i.run_id
    RETURNING i.id, i.run_id, i.command_id, i.attempt_count, i.runner_job_id, i.input,
              i.next_attempt_at, i.created_at, r.tenant_id,
              r.session_ref->>'session_id' AS session_id,
              (SELECT b.capacity FROM agentrun_backends b WHERE b.profile = r.backend_profile)
                AS capacity
),
numbered AS MATERIALIZED (
    SELECT claimed.*, row_number() OVER (ORDER BY next_attempt_at, created_at, id) AS n
    FROM claimed
),
minted AS (
    SELECT k.n, k.key->>'id' AS id, k.key->>'prefix' AS prefix, k.key->>'digest' AS digest
    FROM jsonb_array_elements(%(keys)s::jsonb) WITH ORDINALITY AS k(key, n)
),
keyed AS MATERIALIZED (
    SELECT c.*, m.id AS key_id, m.prefix AS key_prefix, m.digest AS key_digest
    FROM numbered c JOIN minted m ON m.n = c.n
),
issued AS (
    INSERT INTO agentrun_api_keys (
        id, name, tenant_id, role, run_id, key_prefix, key_digest, created_at, expires_at)
    SELECT key_id, 'runner job ' || runner_job_id || ' (attempt ' || attempt_count || ')',
           tenant_id, 'runner', run_id, key_prefix, key_digest, now(),
           now() + %(ttl_s)s * interval '1 second'
    FROM keyed
)
SELECT id, run_id, command_id, attempt_count, runner_job_id, tenant_id, session_id
FROM keyed ORDER BY n
"""

LOCK_RUNS_SQL = "SELECT id, status FROM agentrun_runs WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
LOCK_COMMANDS_SQL = (
    "SELECT id, state FROM agentrun_commands WHERE id = ANY(%s) ORDER BY run_id, seq FOR UPDATE"
)

# The run and command rows are locked by the two statements before this one, in this
# transaction: this statement's snapshot is taken after they were granted, so the fence
# (run and command not terminal) and each run's last seq read what holds under the locks.
SETTLE_SQL = """
WITH j AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS j(
    intent_id text, lease_owner text, attempt_count integer, id text, run_id text,
    command_id text, payload_hash text, attempt_id text, runner_id text, namespace text,
    job_name text, manager_url text, image text, source_commit text, result jsonb,
    outcome text, event_id text, payload jsonb, session_id text)
),
settled AS (
  UPDATE agentrun_runner_dispatch_intents i
  SET state = 'dispatched', dispatch_outcome = j.outcome, dispatched_at = %(now)s,
      actual_runner_job_id = j.id, active_runner_id = j.runner_id, updated_at = %(now)s,
      lease_owner = NULL, lease_expires_at = NULL, last_error = NULL
  FROM j, agentrun_runs r, agentrun_commands c
  WHERE i.id = ANY (ARRAY(SELECT j.intent_id FROM j)) AND i.id = j.intent_id
    AND i.state IS NOT DISTINCT FROM 'dispatching'  -- as `dispatch.sql`: by the keys
    AND i.lease_owner = j.lease_owner AND i.attempt_count = j.attempt_count
    AND r.id = i.run_id AND r.status NOT IN ('completed', 'failed', 'blocked', 'cancelled')
    AND c.id = i.command_id AND c.state NOT IN ('completed', 'failed', 'cancelled')
  RETURNING i.id, i.run_id
),
jobs AS (
  INSERT INTO agentrun_runner_jobs (
    id, run_id, command_id, idempotency_key, payload_hash, attempt_id, runner_id,
    namespace, job_name, manager_url, image, source_commit, result, created_at, updated_at)
  SELECT j.id, j.run_id, j.command_id, j.id, j.payload_hash, j.attempt_id, j.runner_id,
         j.namespace, j.job_name, j.manager_url, j.image, j.source_commit, j.result,
         %(now)s, %(now)s
  FROM j JOIN settled s ON s.id = j.intent_id
  ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
),
base AS MATERIALIZED (
  SELECT s.run_id, count(*) AS n,
         coalesce((SELECT e.seq FROM agentrun_events e WHERE e.run_id = s.run_id
                   ORDER BY e.seq DESC LIMIT 1), 0) AS seq
  FROM settled s GROUP BY s.run_id
),
ins AS (
  INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at)
  SELECT j.event_id, j.run_id,
         b.seq + row_number() OVER (PARTITION BY j.run_id ORDER BY j.intent_id),
         'backend_status', j.payload, %(now)s
  FROM j JOIN settled s ON s.id = j.intent_id JOIN base b ON b.run_id = j.run_id
),
sess AS (
  UPDATE agentrun_sessions ss
  SET last_event_seq = (SELECT b.seq + b.n FROM base b JOIN j ON j.run_id = b.run_id
                        WHERE j.session_id = ss.session_id ORDER BY b.run_id DESC LIMIT 1),
      last_activity_at = %(now)s, updated_at = %(now)s
  WHERE ss.session_id = ANY(%(sessions)s::text[])
  RETURNING 1
)
SELECT b.run_id, b.seq + b.n,
       EXISTS (SELECT 1 FROM agentrun_webhook_endpoints w
               WHERE w.tenant_id = ANY(%(tenants)s::text[]) AND w.enabled
                 AND (w.event_types ? '*' OR w.event_types ? 'backend_status'))
FROM base b
"""

# After the commit, in its own autocommitted statement (as `runs.sql.notify_runs_changed`);
# the payload is `<run id>:<last seq>`, read back by the events' ids (the client has not
# seen the seqs: the statement is pipelined behind the settle).
NOTIFY_SQL = """
SELECT set_config('synchronous_commit', 'off', true),
       pg_notify('agentrun_run_change', e.run_id || ':' || e.seq)
FROM agentrun_events e WHERE e.id = ANY(%s)
"""


def _keys(n: int) -> str:
    """n runner keys, minted as `agentrun.auth.mint_key` does (the secret is not kept:
    the no-op launch does not use it)."""
    keys = []
    for _ in range(n):
        secret = f"ar_runner_{secrets.token_urlsafe(32)}"
        keys.append({"id": new_id("key"), "prefix": secret[:16], "digest": secret_digest(secret)})
    return json.dumps(keys)


def _settle_rows(claims: list[tuple[Any, ...]], owner: str) -> list[dict[str, Any]]:
    rows = []
    for intent_id, run_id, command_id, attempt, job_id, _tenant, session_id in claims:
        runner_id = "runner_" + job_id.removeprefix("rjob_")
        job_name = f"noop-{job_id}"
        spec = {
            "command_id": command_id, "attempt_id": f"{intent_id}:{attempt}",
            "runner_id": runner_id, "namespace": "bench", "job_name": job_name,
            "manager_url": "", "image": "none", "source_commit": "",
            "service_account_name": None,
        }  # fmt: skip
        payload = {
            "phase": "runner-dispatched", "command_id": command_id,
            "dispatch_intent_id": intent_id, "attempt_count": attempt,
            "runner_job_id": job_id, "runner_id": runner_id, "launcher": "noop",
            "job_name": job_name, "namespace": "bench", "dispatch_outcome": "launched",
            "dispatcher": owner,
        }  # fmt: skip
        rows.append(
            {
                **spec,
                "intent_id": intent_id,
                "lease_owner": owner,
                "attempt_count": attempt,
                "id": job_id,
                "run_id": run_id,
                "payload_hash": stable_hash(spec),
                "result": {"launcher": "noop", "outcome": "launched"},
                "outcome": "launched",
                "event_id": new_id("evt"),
                "payload": payload,
                "session_id": session_id,
            }
        )
    return rows


def settle(conn: Any, claims: list[tuple[Any, ...]], owner: str, *, pipelined: bool) -> int:
    """The settle of one batch, in one pipelined round trip or (`pipelined` False) one
    round trip per statement; returns the intents written."""
    rows = _settle_rows(claims, owner)
    params = {
        "rows": json.dumps(rows),
        "now": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "sessions": sorted({r["session_id"] for r in rows if r["session_id"]}),
        "tenants": sorted({c[5] for c in claims}),
    }
    with conn.pipeline() if pipelined else contextlib.nullcontext():
        with conn.transaction():
            conn.execute(LOCK_RUNS_SQL, [sorted({c[1] for c in claims})]).fetchall()
            conn.execute(LOCK_COMMANDS_SQL, [sorted({c[2] for c in claims})]).fetchall()
            written = conn.execute(SETTLE_SQL, params).fetchall()
        conn.execute(NOTIFY_SQL, [[r["event_id"] for r in rows]]).fetchall()
    return len(written)


def writeset_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The ceiling: the settle pipelined (2 round trips per batch)."""
    return _worker(args, pipelined=True)


def writeset_steps_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The same statements, each its own round trip (claim; BEGIN, run locks, command
    locks, settle, COMMIT; NOTIFY: 7 per batch, agentrun's path 8): what agentrun's
    Python costs over the same round trips."""
    return _worker(args, pipelined=False)


def _plan_as_asked(conn: Any, *, unprepared: bool) -> None:
    if unprepared:
        # psycopg prepares a statement from its fifth use; cell 6 asks for every statement
        # planned per call (a generic plan does not follow the dead versions a pinned
        # snapshot piles up: sixth round).
        conn.prepare_threshold = None
        return
    # Prepared from its first use, with a generic plan priced as agentrun's prepared
    # statements are (`agentrun.prepared_sql`'s GENERIC_PLANS and INDEX_PLANS, for the
    # session here): planned once per connection, where psycopg's own rule (prepared from
    # the fifth use, PostgreSQL choosing a custom or generic plan each time) kept planning,
    # and agentrun's statements no longer do (issue 18, ninth round). A ceiling must not
    # carry a cost agentrun does not.
    conn.prepare_threshold = 0
    for setting in (GENERIC_PLANS + INDEX_PLANS).replace("SET LOCAL", "SET").splitlines():
        conn.execute(setting)


def _worker(args: argparse.Namespace, *, pipelined: bool) -> dict[str, Any]:
    import psycopg

    executed: list[str] = []
    starts: list[tuple[str, float]] = []  # with --latency (cell 6): each claim's time
    lock = threading.Lock()
    ready = threading.Barrier(args.slots + 1)
    go: list[float] = []
    last = [0.0]
    unwritten = [0]

    def slot(index: int) -> None:
        owner = f"writeset:{os.getpid()}:{index}"
        with psycopg.connect(env.database_url(), autocommit=True) as conn:
            _plan_as_asked(conn, unprepared=args.unprepared)
            ready.wait()
            ready.wait()
            idle_since = None
            while time.time() < go[0] + args.seconds:
                params = {
                    "owner": owner, "lease_ms": LEASE_MS, "limit": args.batch,
                    "keys": _keys(args.batch), "ttl_s": KEY_TTL_S,
                }  # fmt: skip
                # The rescue of expired leases and the claim, one transaction in one
                # round trip (a pipeline), as agentrun's claim string
                with conn.pipeline(), conn.transaction():
                    conn.execute(RESCUE_SQL, {"limit": args.batch})
                    claimed = conn.execute(CLAIM_SQL, params)
                claims = claimed.fetchall()
                if not claims:
                    idle_since = idle_since or time.time()
                    producing = args.latency and time.time() < go[0] + args.until
                    if not producing and time.time() - idle_since > args.idle:
                        break
                    time.sleep(0.005 if args.latency else 0.02)
                    continue
                idle_since = None
                now = time.time()
                for claim in claims:  # the no-op launch, as the agentrun side's
                    worker_process.JOURNAL.write("start", claim[0])
                with lock:
                    executed.extend(claim[0] for claim in claims)
                    if args.latency:
                        starts.extend((claim[0], now) for claim in claims)
                written = settle(conn, claims, owner, pipelined=pipelined)
                with lock:
                    unwritten[0] += len(claims) - written
                last[0] = max(last[0], time.time())

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(args.slots)]
    for thread in threads:
        thread.start()
    ready.wait()
    go.append(wait_for_go())
    ready.wait()
    for thread in threads:
        thread.join()
    return {
        "executed": executed,
        "starts": starts,
        "go": go[0],
        "last_work": last[0],
        "unwritten": unwritten[0],
    }
