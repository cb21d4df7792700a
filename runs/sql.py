"""The runs app's raw SQL that takes no lock of its own: the event append's one statement.

`insert_events` is what every append ends in (a runner's batch, a server event, a batch
settle over many runs): one statement reads each run's last seq, inserts the events with
the following seqs and advances their sessions' `last_event_seq` and activity. Before it
was three statements (the seq read, the INSERT, the session UPDATE), each a round trip
and ~0.3-0.5 ms of ORM CPU.

`notify_runs_changed` sends the `agentrun_run_change` notifications *after* the append
committed, in a transaction of their own that writes nothing and commits asynchronously.
Why not in the append's transaction: PostgreSQL serialises the commits of every
transaction that has queued a NOTIFY (a cluster-wide lock taken before the commit record
and held until it is flushed), so with the NOTIFY inside, no two appends' commits could
share a WAL flush. Bench cell 1 measured it: 1,722 raw appends/s without NOTIFY, 594 with
it, at 8 writers. The price: a process that dies between the commit and this statement
leaves its waiters asleep until their poll times out (they re-read; nothing is lost).
`commit_and_notify_runs_changed` sends the COMMIT and that statement in one round trip
(one simple-query string of two statements): a runner's append is the hot path, and the
notification's own round trip through Django's cursor was ~15 % of its CPU (issue 18).

Why raw SQL: this is the measured hot path (bench cell 1). The ORM cannot say a
data-modifying CTE, `INSERT … SELECT FROM unnest(…)` or `pg_notify` at all, and its query
compilation was most of the append's CPU (issue 18). The run rows must already be locked
by the caller (`runs.locks`): the statement starts after the locks were granted, so its
snapshot sees every event committed before them, and the seqs it computes are the next
ones. The session rows are locked by the UPDATE in session id order (an index scan of
`= ANY`), after the run rows, as the lock order wants; the outbox key locks come after,
in CTEs the caller adds to the same statement (`outbox.record`), which read every row of
the session UPDATE before they take the first key lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from agentrun.prepared_sql import (
    GENERIC_PLANS,
    INDEX_PLANS,
    default_connection,
    execute_hot,
    prepared,
)
from agentrun.raw_sql import RowWrite, mark_inserted, write_ctes
from runs.models import Run

RUN_CHANGE_CHANNEL = "agentrun_run_change"
# Sent after an append that wrote Kafka outbox records committed (payload: a partition key
# that got records), in the same after-commit statement as the run changes: a relay worker
# that LISTENs on it can claim at once, and then the per-commit Celery wake-up of the relay
# (`AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT`) can be switched off. That publish was most of
# what the outbox cost an append (bench cell 1, `1.outbox.8w`); this notification costs
# no round trip of its own.
OUTBOX_COMMIT_CHANNEL = "agentrun_outbox_committed"

# - `base`: each run's last seq, by one backward probe of the (run, seq) index per run;
# - `ins`: the events, seq = base + their offset within their run;
# - `sess`: per session, the last seq of the run that appended to it last (the caller
#   says which run that is), not a versioned change;
# - the last column: whether any enabled webhook endpoint of the runs' tenants could match
#   one of the events' types (one probe of the endpoints' partial tenant index). When none
#   can, the caller skips the webhook-delivery INSERT … SELECT, a round trip that would
#   write nothing. Why this cannot lose a delivery: the check reads this statement's
#   snapshot, taken after the run locks were granted. An endpoint whose creation committed
#   before it is seen, and the INSERT … SELECT runs; one committing later would have been
#   missed as well by that INSERT … SELECT had its snapshot preceded the commit, so the
#   event simply happened before the endpoint existed (tests/runs/test_append_webhook_check.py
#   races endpoint creation against appends from real threads). No cache, so no staleness.
_INSERT_EVENTS_SQL = """\
WITH base AS MATERIALIZED (
  SELECT r.run_id, r.n,
         coalesce((SELECT e.seq FROM agentrun_events e WHERE e.run_id = r.run_id
                   ORDER BY e.seq DESC LIMIT 1), 0) AS seq
  FROM jsonb_to_recordset(%(runs)s::jsonb) AS r(run_id text, n int)
),
ins AS (
  INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at)
  SELECT e.id, e.run_id, b.seq + e.k, e.type, e.payload, %(now)s::timestamptz
  FROM jsonb_to_recordset(%(events)s::jsonb)
    AS e(id text, run_id text, k int, type text, payload jsonb)
  JOIN base b ON b.run_id = e.run_id
),
sess AS (
  UPDATE agentrun_sessions s
  SET last_event_seq = (SELECT b.seq + b.n FROM base b
                        WHERE b.run_id = %(session_runs)s::jsonb ->> s.session_id),
      last_activity_at = %(now)s::timestamptz,
      updated_at = %(now)s::timestamptz
  WHERE s.session_id = ANY(%(sessions)s::text[])
  RETURNING 1
){extra}
SELECT b.run_id, b.seq,
       EXISTS (SELECT 1 FROM agentrun_webhook_endpoints w
               WHERE w.tenant_id = ANY(%(tenants)s::text[]) AND w.enabled
                 AND (w.event_types ? '*' OR w.event_types ?| %(types)s::text[]))
FROM base b
"""

# `set_config(…, true)` holds for this statement's own (autocommit) transaction only: its
# commit does not wait for a WAL flush, so it holds the notify lock for microseconds.
_NOTIFY_SQL = """\
SELECT set_config('synchronous_commit', 'off', true), pg_notify(n.channel, n.payload)
FROM unnest(%s::text[], %s::text[]) AS n(channel, payload)
"""


@dataclass(frozen=True)
class EventRow:
    """One event to insert: its offset is its place in its run's batch, from 1."""

    id: str
    run_id: str
    offset: int
    type: str
    payload: Any


@dataclass(frozen=True)
class InsertedEvents:
    """What `insert_events` read: each run's last seq *before* the insert (its events got
    that + offset), and whether a webhook endpoint could match (see the statement)."""

    last_seqs: dict[str, int]
    endpoints_may_match: bool


def insert_events(
    *,
    rows: list[EventRow],
    session_runs: dict[str, str],
    tenants: list[str],
    now: datetime,
    extra_ctes: tuple[str, dict[str, Any]] | None = None,
    prepare: bool = False,
) -> InsertedEvents:
    """Insert `rows` after each run's last seq, in one statement. `session_runs`: session
    id → the run whose last seq the session records; `tenants`: the runs' tenants.
    `extra_ctes`: more CTEs for the same statement and their parameters (the outbox
    records, `outbox.record.outbox_records_locked`), which may read `base` (each run's
    last seq before the insert) and `sess` (one row per session row updated, and locked,
    by then) and `%(now)s::timestamptz`. `prepare`: a runner's append, run prepared with a
    generic plan (`_PLANS`). Needs the caller's transaction and every run's row
    lock."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.run_id] = counts.get(row.run_id, 0) + 1
    # Every parameter is a string (JSON text, array literals): the connection binds
    # parameters client side, where a list or a datetime costs a dumper lookup and Python
    # quoting per element, per statement (10 % of an append's CPU with four lists, a
    # Jsonb and three datetimes, profiled single-threaded; issue 18). A JSON text or an
    # array literal is one C-quoted string.
    params: dict[str, Any] = {
        "runs": json.dumps([{"run_id": run_id, "n": n} for run_id, n in counts.items()]),
        "events": json.dumps(
            [
                dict(id=r.id, run_id=r.run_id, k=r.offset, type=r.type, payload=r.payload)
                for r in rows
            ]
        ),
        "now": now.isoformat(),
        "session_runs": json.dumps(session_runs),
        "sessions": text_array(sorted(session_runs)),
        "tenants": text_array(sorted(set(tenants))),
        "types": text_array(sorted({r.type for r in rows})),
    }
    # `{extra}` marks where the caller's CTEs go (a plain replace, not a format string).
    sql = _INSERT_EVENTS_SQL.replace("{extra}", "")
    if extra_ctes is not None:
        sql = _INSERT_EVENTS_SQL.replace("{extra}", f",\n{extra_ctes[0]}")
        params.update(extra_ctes[1])
    if prepare:
        statement = prepared("append_events", sql)
        found = execute_hot(default_connection(), statement, params, before=_PLANS)
    else:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
    return InsertedEvents(
        last_seqs={run_id: seq for run_id, seq, _ in found},
        endpoints_may_match=any(match for _, _, match in found),
    )


# A runner's append and a dispatch batch's settle run the events statement prepared
# (`prepare=True`, `agentrun.prepared_sql.execute_hot`), and PostgreSQL would still plan
# it on every call: after five custom plans it keeps choosing custom ones (~0.3 ms of
# planning per append), since the generic plan's estimate is dearer, the session UPDATE's
# `= ANY($n)` being read as ten rows (a bitmap scan of the session index) where a custom
# plan sees one. The plans are the same probes otherwise (each run's last seq by a
# backward index-only scan of (run_id, seq), the session by its id, the endpoints'
# check), so the transaction asks for the generic one, priced with indexes only
# (`GENERIC_PLANS`, `INDEX_PLANS`: planned once per connection, maybe while the events
# table was small). A runner's append is one run, so at most one session row: the session
# id order of the session locks (see the module doc) is moot there; a batch append is
# prepared only when it too locks at most one session row
# (`runs.services.event_log._store`).
_PLANS = GENERIC_PLANS + INDEX_PLANS


def text_array(values: list[str]) -> str:
    """The literal of a `text[]`, every element double-quoted (`\\` and `"` escaped), for a
    `%s::text[]` parameter bound as one string (see `insert_events`)."""
    quoted = (value.replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return "{" + ",".join(f'"{value}"' for value in quoted) + "}"


def notify_runs_changed(
    last_seqs: dict[str, int],
    *,
    sessions: dict[str, str] | None = None,
    outbox_keys: list[str] | None = None,
) -> None:
    """`NOTIFY agentrun_run_change, '<run id>:<last seq>'` per run, in one statement. Call
    it outside a transaction, after the events committed (the long-poll listener wakes
    exactly the waiters concerned without reading the database: `runs.waiting`); a
    session's run adds `:<session id>`, which wakes that session's streams (a new run's
    first event too). `outbox_keys`: the partition keys that got outbox records,
    one `OUTBOX_COMMIT_CHANNEL` notification each (the relay's LISTEN wake-up)."""
    with connection.cursor() as cursor:
        cursor.execute(_NOTIFY_SQL, _notify_params(last_seqs, sessions, outbox_keys))


def commit_and_notify_runs_changed(
    db: BaseDatabaseWrapper,
    last_seqs: dict[str, int],
    *,
    sessions: dict[str, str] | None = None,
    outbox_keys: list[str] | None = None,
) -> None:
    """COMMIT the connection's transaction, then `notify_runs_changed`, in one round trip:
    one simple-query string, `COMMIT; SELECT … pg_notify(…)` (bound client side, so the
    parameters are in the text and PostgreSQL runs the statements in order); the NOTIFY's
    statement prepared as the append's others are (`agentrun.prepared_sql.execute_hot`: `COMMIT;
    EXECUTE …` from a connection's third append on), which spares the backend its parse
    and plan (a third of that statement's CPU, measured alone).
    The NOTIFY runs in a transaction of its own after the COMMIT (PostgreSQL starts an
    implicit one for the rest of the string), never in the append's: the append's commit
    takes no notify lock. If the COMMIT fails the NOTIFY is not run. The caller must be
    the outermost transaction's last statement; psycopg then finds the transaction ended,
    so Django's own commit sends nothing (`runs.services.event_log.commit_appends`). `db`:
    the default connection (`agentrun.prepared_sql.default_connection`); the string is sent on
    its psycopg connection, as a runner's append's other statements are."""
    params = _notify_params(last_seqs, sessions, outbox_keys)
    execute_hot(db, prepared("run_change_notify", _NOTIFY_SQL), params, head=_COMMIT)


def event_committed(run_id: str, seq: int) -> bool:
    """Whether the run's event `seq` is committed (after a failed
    `commit_and_notify_runs_changed`, whose COMMIT may have taken)."""
    with connection.cursor() as cursor:
        cursor.execute(_EVENT_EXISTS_SQL, [run_id, seq])
        return bool(cursor.fetchone()[0])


def transaction_idle() -> bool:
    """Whether the connection is outside any transaction (psycopg's view, no round trip)."""
    raw = connection.connection
    return raw is not None and raw.info.transaction_status == TransactionStatus.IDLE


_COMMIT = "COMMIT;\n"
_EVENT_EXISTS_SQL = "SELECT EXISTS (SELECT FROM agentrun_events WHERE run_id = %s AND seq = %s)"


def _notify_params(
    last_seqs: dict[str, int], sessions: dict[str, str] | None, outbox_keys: list[str] | None
) -> list[str]:
    sessions = sessions or {}
    payloads = [
        f"{run_id}:{seq}:{sessions[run_id]}" if sessions.get(run_id) else f"{run_id}:{seq}"
        for run_id, seq in last_seqs.items()
    ]
    keys = outbox_keys or []
    channels = [RUN_CHANGE_CHANNEL] * len(payloads) + [OUTBOX_COMMIT_CHANNEL] * len(keys)
    return [text_array(channels), text_array(payloads + keys)]


# --- a run's end, in one statement ----------------------------------------------------
#
# Why raw: every path that ends a run (a cancel, a runner's finish, the reaper, a dispatch
# that gave up) wrote its end as five to nine ORM statements, each a round trip and ~1 ms
# of CPU (bench cell 9: an interrupting turn admission spent 42 % of its time cancelling
# the active run). One data-modifying CTE writes the same rows: the run's changed columns
# (its terminal status and, for a cancel, its cancel mark: one UPDATE where there were
# two), its closed commands' columns, its open dispatch intents fenced (a closed command's
# with that command's reason, the rest with the run's: what `dispatch.intents
# .fence_open_intents_locked` writes, per command and then per run), the lease row
# deleted and its runner keys revoked (as `agentrun.auth.revoke_run_keys_locked` does).
# The run and command rows are locked by the caller already; the intent, lease and key
# rows are locked by this statement, after them, as the lock order wants.

# The statement also reads what the run's end asks of the queue next (`queues.projection
# .on_run_terminal_locked`): the task of the run's first attempt and whether its session has
# queued turns (`queues.selectors.task_and_queued_turns_of`, its own round trip and ~1.5 ms
# of ORM CPU before). It reads no row the statement writes.

# `dispatch.models.OPEN_INTENT_STATES`, `IntentState.CANCELLED`, `queues.models.TaskState
# .PENDING` (runs may import those apps only through their projection modules;
# tests/runs/test_run_end_statement.py pins them equal).
OPEN_INTENT_STATES = ("pending", "retry", "dispatching")
INTENT_CANCELLED = "cancelled"
TASK_PENDING = "pending"


@dataclass(frozen=True)
class QueueOfRun:
    """What `end_run` read of the queue: the task of the run's first attempt (None when
    none), whether the run's session has queued turns (False without a session)."""

    attempt_task_id: str | None
    queued_turns: bool


_END_RUN_TAIL = """\
intents AS (
  UPDATE agentrun_runner_dispatch_intents i
  SET state = %s, lease_owner = NULL, lease_expires_at = NULL, updated_at = %s,
      last_error = coalesce((%s::jsonb) -> i.command_id, %s::jsonb)
  WHERE i.run_id = %s AND i.state = ANY(%s::text[])
),
lease AS (DELETE FROM agentrun_leases WHERE run_id = %s),
keys AS (
  UPDATE agentrun_api_keys SET revoked_at = %s
  WHERE run_id = %s AND role = 'runner' AND revoked_at IS NULL
)
SELECT (SELECT a.task_id FROM agentrun_queue_attempts a WHERE a.run_id = %s
        ORDER BY a.task_id, a.attempt_id LIMIT 1),
       EXISTS (SELECT 1 FROM agentrun_queue_tasks t
               WHERE t.tenant_id = %s AND t.state = %s
                 AND t.session_ref ->> 'session_id' = %s)
"""


def end_run(
    *, run: Run, writes: list[RowWrite], intent_reasons: dict[str, str], reason: str
) -> QueueOfRun:
    """Write the end of a locked run in one statement (see above): `writes` (the run's own
    first, then its commands'), its open intents fenced with `intent_reasons[command id]`
    or else `reason`, its lease row deleted and its runner keys revoked; returns what it
    read of the queue. Needs the caller's transaction and the run's and the written
    commands' row locks."""
    now = run.updated_at  # the run's end time, set by the caller
    ctes, params = write_ctes(writes)
    errors = {key: {"reason": why, "fenced": True} for key, why in intent_reasons.items()}
    params += [INTENT_CANCELLED, now, Jsonb(errors), Jsonb({"reason": reason, "fenced": True})]
    params += [run.pk, list(OPEN_INTENT_STATES), run.pk, now, run.pk]
    params += [run.pk, run.tenant_id, TASK_PENDING, run.session_id]
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {ctes},\n{_END_RUN_TAIL}", params)
        task_id, queued = cursor.fetchone()
    mark_inserted([write.row for write in writes if write.fields is None])
    return QueueOfRun(task_id, bool(queued))


# --- a new run's backend profile, checked in its insert statement ----------------------
#
# Why raw: run creation inside a collecting block (`agentrun.row_inserts`) checks its
# backend profile in the statement that inserts the run (its ORM `exists()` was a round
# trip and ~0.5 ms of query compilation per turn admission, bench cell 9).


def backend_exists_check(profile: str) -> tuple[str, list[Any]]:
    """The boolean SQL expression "the backend profile exists", and its parameters."""
    return "EXISTS (SELECT FROM agentrun_backends WHERE profile = %s)", [profile]
