"""Row locks of the dispatch app.

- `claim_due_intents` is the worker claim (seed `claimRunnerDispatchIntents`): raw SQL,
  because the ORM cannot say `UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED LIMIT n)`.
  Its rescue comes first, in the same transaction: intents whose claim's lease expired
  are given back (`retry`), then claimed with the due ones, as the seed's claim took an
  expired lease again in its one walk (migration 0006 says why it is two).
  `claim_due_intents_with_keys` is the same claim with its runner keys' INSERT in the
  same statement (a data-modifying CTE), the dispatcher's pickup path.
- `lock_intent` locks one intent for a fenced retry / terminalise (and a refused complete:
  a batch's complete locks its intents by its write, `dispatch.sql`).

Lock order, as everywhere: the run row, then its command rows, then the intent rows. The
claim only locks intent rows, and with SKIP LOCKED, so it never waits and never deadlocks.
Every helper must be called inside the caller's `transaction.atomic()`, but the claim with
keys, which is a transaction of its own.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agentrun.auth import MintedKey
from agentrun.errors import not_found
from agentrun.models import ApiKeyRole
from agentrun.prepared_sql import (
    GENERIC_PLANS,
    INDEX_PLANS,
    Prepared,
    default_connection,
    execute_hot_sets,
    prepared,
)
from dispatch.models import RunnerDispatchIntent

# Why only `FOR UPDATE OF i`, not `OF r, c, i` as the seed: the run row is the hot lock of
# every runner write (events, heartbeats), so SKIP LOCKED on it would starve intents of
# busy runs. It is not needed for safety: every path that makes a run or command terminal
# fences its open intents under the run lock, and that UPDATE waits for our intent lock and
# then re-reads the row, so a claim racing a cancel ends `cancelled`; complete / retry /
# terminalise re-check run and command under the run lock. `state IN (…)` repeats the
# partial index predicate so the planner uses `agentrun_rdi_due_idx`.
_DUE_SQL = """
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
"""
_CLAIM_UPDATE_SQL = """
UPDATE agentrun_runner_dispatch_intents i
SET state = 'dispatching',
    attempt_count = i.attempt_count + 1,
    lease_owner = %(owner)s,
    lease_expires_at = now() + %(lease_ms)s * interval '1 millisecond',
    updated_at = now()
FROM due, agentrun_runs r
WHERE i.id = due.id AND r.id = i.run_id
RETURNING i.id, i.run_id, i.command_id, i.attempt_count, i.lease_owner, i.lease_expires_at,
          i.runner_job_id, i.input, i.next_attempt_at, i.created_at,
          r.backend_profile, r.tenant_id, r.session_ref->>'session_id' AS session_id,
          (SELECT b.capacity FROM agentrun_backends b WHERE b.profile = r.backend_profile)
            AS capacity
"""
_CLAIM_SQL = f"WITH due AS ({_DUE_SQL}){_CLAIM_UPDATE_SQL}"

# The claim's rescue: up to `limit` claimed intents whose lease expired (their worker died
# or hung) are given back, to be claimed by the statement after it in the same
# transaction: the claim bumps the attempt, so the lost worker's token is stale (its
# completion is refused). Before migration 0006 the claim found them in its own walk of
# the due index, which then held every claimed intent. It reads `agentrun_rdi_lease_idx`,
# whose entries ahead of `now()` are only expired leases: with none, one index probe. A
# `dispatching` intent always has a lease (the claim sets it; every way out of the state
# clears it), so the seed's `OR lease_expires_at IS NULL` is not repeated: it would make
# the index unusable. SKIP LOCKED: a concurrent claimer's rescue takes the others.
_RESCUE_SQL = """
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

# The columns of a claim with keys, named here once: its rows are read by these names, not
# by the cursor's `description`, which builds a column object per column per claim (~40 µs
# of a batch's Python CPU, bench cell 3).
_CLAIM_WITH_KEYS_COLUMNS = (
    "id", "lease_owner", "attempt_count", "run_id", "command_id", "runner_job_id", "input",
    "backend_profile", "tenant_id", "session_id", "capacity", "key_id",
)  # fmt: skip

# The claim and its runner keys in one statement: the n-th claimed intent (oldest due
# first) gets the n-th key minted by the caller (`WITH ORDINALITY`); keys beyond the
# claimed rows are never written. Why one statement: it is its own transaction, so the
# pickup path pays one round trip and one commit before the first launch, where BEGIN,
# claim, key INSERT, COMMIT were four (bench cell 4).
_CLAIM_WITH_KEYS_SQL = f"""
WITH due AS ({_DUE_SQL}),
claimed AS ({_CLAIM_UPDATE_SQL}),
numbered AS MATERIALIZED (
    SELECT claimed.*, row_number() OVER (ORDER BY next_attempt_at, created_at, id) AS n
    FROM claimed
),
minted AS (
    SELECT k.n, k.key->>'id' AS id, k.key->>'prefix' AS prefix, k.key->>'digest' AS digest
    FROM jsonb_array_elements(%(keys)s::jsonb) WITH ORDINALITY AS k(key, n)
),
keyed AS MATERIALIZED (
    SELECT c.*, m.id AS key_id, m.prefix AS key_prefix, m.digest AS key_digest,
           'runner job ' || c.runner_job_id || ' (attempt ' || c.attempt_count || ')'
             AS key_name
    FROM numbered c JOIN minted m ON m.n = c.n
),
issued AS (
    INSERT INTO agentrun_api_keys (
        id, name, tenant_id, role, run_id, key_prefix, key_digest, created_at, expires_at)
    SELECT key_id, key_name, tenant_id, %(role)s, run_id, key_prefix, key_digest, %(now)s,
           %(expires_at)s
    FROM keyed
)
-- What the worker reads (`claims.IntentClaim`, the key's id): not the claim's
-- timestamps, whose decoding was a tenth of the claim's Python CPU (bench cell 3).
SELECT {", ".join(_CLAIM_WITH_KEYS_COLUMNS)}
FROM keyed ORDER BY n
"""  # noqa: S608 (the fragments are constants of this module)


def claim_due_intents(*, owner: str, lease_ms: int, limit: int) -> list[dict[str, Any]]:
    """Claim up to `limit` due intents of live runs and commands, oldest due first.

    Bumps `attempt_count` and sets the lease; returns one dict per claimed intent (with its
    run's backend profile, tenant and the profile's `capacity`, so that a worker needs no
    second read to know whether the profile is limited). Needs the caller's transaction:
    the claim is the commit of that transaction, one per batch.
    """
    assert connection.in_atomic_block, "claim_due_intents needs an open transaction"
    with connection.cursor() as cursor:
        cursor.execute(_RESCUE_SQL, {"limit": limit})
    rows = _fetch_dicts(_CLAIM_SQL, {"owner": owner, "lease_ms": lease_ms, "limit": limit})
    rows.sort(key=lambda row: (row["next_attempt_at"], row["created_at"]))
    return rows


def claim_due_intents_with_keys(
    *, owner: str, lease_ms: int, keys: list[MintedKey], expires_at: datetime
) -> list[dict[str, Any]]:
    """`claim_due_intents` of up to `len(keys)` intents, and each claimed intent's
    run-scoped runner key inserted by the same statement (`key_id` in its row: the n-th
    claim holds the n-th key). A row has what the worker reads of its claim, not the
    claim's timestamps (`claim_due_intents` returns those, to sort by). A transaction of
    its own, sent in one string with its BEGIN and COMMIT: must be called outside any
    transaction, so the claim and its keys are committed before the caller launches
    (rule 7).

    Prepared, with a generic plan priced with indexes only (`agentrun.prepared_sql`'s
    `GENERIC_PLANS`, `INDEX_PLANS`), the batch size written into its text (one prepared
    statement per size): planned for its arguments on every call, its planning cost more
    than its execution (0.6 of 1.0 ms per batch of ten, `pg_stat_statements`, bench cell
    3 through Celery). With the limit a literal, the generic plan is the custom one: the
    due index in order, each run and command by its key, stopped after `limit` rows
    locked."""
    assert not connection.in_atomic_block, "a claim with keys commits on its own"
    params = {
        "owner": owner,
        "lease_ms": lease_ms,
        "keys": json.dumps(
            [{"id": k.id, "prefix": k.key_prefix, "digest": k.key_digest} for k in keys]
        ),
        "role": ApiKeyRole.RUNNER.value,
        "now": timezone.now(),
        "expires_at": expires_at,
    }
    db = default_connection()
    with transaction.atomic(durable=True):
        _rescued, rows = execute_hot_sets(
            db,
            [(_rescue(len(keys)), {}), (_claim_with_keys(len(keys)), params)],
            begins=True,
            before=INDEX_PLANS + GENERIC_PLANS,
            commits=True,
        )
    return [dict(zip(_CLAIM_WITH_KEYS_COLUMNS, row, strict=True)) for row in rows]


@cache
def _claim_with_keys(limit: int) -> Prepared:
    """The claim with keys of `limit` intents (an int, written into the text)."""
    text = _CLAIM_WITH_KEYS_SQL.replace("%(limit)s", str(int(limit)))
    return prepared("claim_with_keys", text)


@cache
def _rescue(limit: int) -> Prepared:
    """The rescue of up to `limit` expired claims (an int, written into the text)."""
    return prepared("rescue_expired", _RESCUE_SQL.replace("%(limit)s", str(int(limit))))


def _fetch_dicts(sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The statement's rows as dicts, by the cursor's description."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def lock_intent(intent_id: str) -> RunnerDispatchIntent:
    """`SELECT … FOR UPDATE` one intent; 404 if it does not exist. Take the run lock (and
    the command lock) first. `no_key=True`: no foreign key points at intents, and a claim's
    settle never changes the key."""
    intent = RunnerDispatchIntent.objects.select_for_update(no_key=True).filter(pk=intent_id)
    found = intent.first()
    if found is None:
        raise not_found("dispatch intent", intent_id)
    return found
