"""The dispatch app's raw SQL that takes no explicit lock: a batch completion's write.

`record_dispatched_statement` is the write of `claims.complete_intents`: one statement
saves the batch's runner jobs and marks its intents `dispatched`, each intent pointing at
the job saved under its planned id. It is sent in the round trip of the run and command
locks (`runs.locks.lock_runs_and_commands`), after them; so it checks itself that each
intent's run and command have not ended, which the caller checked in Python before it
had the locks' rows (issue 18's seventh round: a round trip less per batch). Before it
was three ORM statements (a read of replays, a `bulk_create` of `RunnerJob` instances, an
UPDATE with three correlated subqueries) and about a third of a batch's Python CPU (bench
cell 3's profile; issue 18 item 1).

Why raw SQL: the ORM cannot say a data-modifying CTE, so the INSERT and the UPDATE would
be two round trips, and building model instances for rows nothing reads again was most
of their CPU. The rows travel as one JSON text (`jsonb_to_recordset`): client-side binding
of a dozen arrays cost more than the statement. The run and command row locks are the
caller's (`dispatch.locks`, `runs.locks`), taken before this statement; the intents' lock
is this statement's own UPDATE, a compare-and-set on each claim's token (state
`dispatching`, owner, attempt), where it was a `SELECT … FOR NO KEY UPDATE` of every
intent before the write: one round trip less per batch, and no intent row read into a
model that the write then replaced (issue 18, cell 3). Under READ COMMITTED an UPDATE that
meets a row changed by a transaction committed meanwhile re-checks its WHERE on the new
row, so a claim re-taken or settled meanwhile is never written; the jobs are inserted only
for the intents the UPDATE wrote.

A replay: a job already saved under an intent's planned id (the job's idempotency key) is
kept, not written again (`ON CONFLICT … DO NOTHING`). The planned id is fresh for each
plan (a relaunch plans a new one) and the intent is live under the caller's lock, so no
completion of this plan has committed; the clause keeps the write idempotent regardless.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from agentrun.prepared_sql import REPLAN_AFTER, Prepared, prepared
from dispatch.models import RunnerDispatchIntent
from runs.models import TERMINAL_COMMAND_STATES, TERMINAL_RUN_STATUSES

# The fields of a settled intent that its caller sees (`RunnerDispatchIntent.from_db`; the
# others are left deferred): what the write set, and the claim's own ids. In the model's
# field order, which `from_db` reads a partial row in.
_SETTLED = {
    "id", "run_id", "command_id", "state", "attempt_count", "lease_owner", "lease_expires_at",
    "dispatch_outcome", "dispatched_at", "actual_runner_job_id", "active_runner_id",
    "updated_at",
}  # fmt: skip
_SETTLED_FIELDS = [f for f in RunnerDispatchIntent._meta.concrete_fields if f.attname in _SETTLED]
SETTLED_NAMES = [field.attname for field in _SETTLED_FIELDS]
# Of those, the timestamps are what the statement set them to (`now`, or NULL): they are
# not returned, as decoding them was a tenth of the write's Python CPU (bench cell 3).
_SET_TIMES = ("lease_expires_at", "dispatched_at", "updated_at")
_RETURNED = [field for field in _SETTLED_FIELDS if field.attname not in _SET_TIMES]
_RETURNED_NAMES = [field.attname for field in _RETURNED]
_RETURNING = ", ".join(f"i.{field.column}" for field in _RETURNED)

_TERMINAL_RUN = ", ".join(f"'{status}'" for status in sorted(TERMINAL_RUN_STATUSES))
_TERMINAL_COMMAND = ", ".join(f"'{state}'" for state in sorted(TERMINAL_COMMAND_STATES))

_RECORD_DISPATCHED_SQL = f"""\
WITH j AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS j(
    intent_id text, lease_owner text, attempt_count integer,
    id text, run_id text, command_id text, payload_hash text,
    attempt_id text, runner_id text, namespace text, job_name text, manager_url text,
    image text, source_commit text, service_account_name text, result jsonb, outcome text)
),
settled AS (
  UPDATE agentrun_runner_dispatch_intents i
  SET state = 'dispatched', dispatch_outcome = j.outcome,
      dispatched_at = %(now)s::timestamptz, updated_at = %(now)s::timestamptz,
      actual_runner_job_id = j.id, active_runner_id = j.runner_id,
      -- the claim's lease ends with the dispatch
      lease_owner = NULL, lease_expires_at = NULL, last_error = NULL
  FROM j, agentrun_runs r, agentrun_commands c
  -- The claim's fence, as a compare-and-set on its token: an intent re-claimed or settled
  -- meanwhile is not written (the caller reads it to say why).
  -- The intents by their key: `= ANY` of the batch's ids, which the planner prices as a
  -- few rows, and the state not as an index condition (`IS NOT DISTINCT FROM`: the
  -- state is never NULL). Joined on `j` alone (priced as 100 rows, a set-returning
  -- function's guess) with `state = 'dispatching'`, the planner read every claimed
  -- intent through an index on the state instead of ten by their keys: under a pinned
  -- snapshot 7,000 to 21,000 dead entries a settle (bench cell 6, auto_explain).
  WHERE i.id = ANY (ARRAY(SELECT j.intent_id FROM j)) AND i.id = j.intent_id
    AND i.state IS NOT DISTINCT FROM 'dispatching'
    AND i.lease_owner = j.lease_owner AND i.attempt_count = j.attempt_count
  -- ... and the run's and the command's: neither ended. Their rows are locked by the
  -- caller (before this statement, in its round trip), so they are as the caller read
  -- them; it fences the intents of those that ended (`claims.complete_intents`).
    AND r.id = i.run_id AND r.status NOT IN ({_TERMINAL_RUN})
    AND c.id = i.command_id AND c.state NOT IN ({_TERMINAL_COMMAND})
  RETURNING {_RETURNING}
),
jobs AS (
  INSERT INTO agentrun_runner_jobs (
    id, run_id, command_id, idempotency_key, payload_hash, attempt_id, runner_id,
    namespace, job_name, manager_url, image, source_commit, service_account_name, result,
    created_at, updated_at)
  SELECT j.id, j.run_id, j.command_id, j.id, j.payload_hash, j.attempt_id, j.runner_id,
         j.namespace, j.job_name, j.manager_url, j.image, j.source_commit,
         j.service_account_name, j.result, %(now)s, %(now)s
  FROM j JOIN settled ON settled.id = j.intent_id
  ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
)
SELECT * FROM settled
"""  # noqa: S608 (the columns are this module's constants)
# Prepared as the locks in front of it are (`runs.locks.lock_runs_and_commands`), and
# planned again every REPLAN_AFTER runs: its plan does not depend on its parameters (a
# JSON text, a time), but it does on the intents' statistics and number, through the
# claim's state (`agentrun.prepared_sql.REPLAN_AFTER` says how).
_RECORD_DISPATCHED = prepared(
    "record_dispatched", _RECORD_DISPATCHED_SQL, replan_after=REPLAN_AFTER
)


@dataclass(frozen=True)
class DispatchedJob:
    """One launched intent's runner job, as its row is written (`result` redacted)."""

    intent_id: str
    lease_owner: str  # the claim's token (with attempt_count): the write's compare-and-set
    attempt_count: int
    id: str  # the intent's planned runner job id, also the job's idempotency key
    run_id: str
    payload_hash: str
    result: dict[str, Any]
    outcome: str | None
    # The job's other columns, named as they are (`runs.services.runners.RunnerJobSpec`):
    # command_id, attempt_id, runner_id, namespace, job_name, manager_url, image, ...
    columns: dict[str, Any]

    def row(self) -> dict[str, Any]:
        return {
            **self.columns,
            "intent_id": self.intent_id,
            "lease_owner": self.lease_owner,
            "attempt_count": self.attempt_count,
            "id": self.id,
            "run_id": self.run_id,
            "payload_hash": self.payload_hash,
            "result": self.result,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class Settled:
    """The intents `record_dispatched_statement` wrote: their ids, and on demand the intents
    as the write left them (`intents()`, the `SETTLED_NAMES` loaded). Not read into models
    unless asked: a batch's dispatcher needs only how many, and `from_db` of every written
    intent was a twentieth of a dispatch batch's Python CPU (bench cell 3, issue 18)."""

    rows: list[tuple[Any, ...]]
    now: datetime

    @property
    def ids(self) -> set[str]:
        return {row[_ID] for row in self.rows}

    def intents(self) -> list[RunnerDispatchIntent]:
        times = {"lease_expires_at": None, "dispatched_at": self.now, "updated_at": self.now}
        settled = []
        for row in self.rows:
            values = {**dict(zip(_RETURNED_NAMES, row, strict=True)), **times}
            settled.append(
                RunnerDispatchIntent.from_db(
                    connection.alias, SETTLED_NAMES, [values[name] for name in SETTLED_NAMES]
                )
            )
        return settled


_ID = _RETURNED_NAMES.index("id")


def record_dispatched_statement(
    jobs: list[DispatchedJob], *, now: datetime
) -> tuple[Prepared, dict[str, Any]]:
    """The statement that saves the jobs and marks their intents dispatched, for the
    intents still held by their claim (state, owner, attempt) whose run and command have
    not ended, and its parameters; its rows are the intents it wrote (`Settled`). The
    caller sends it in its locks' round trip (`runs.locks.lock_runs_and_commands`): it
    needs the caller's transaction and, before it, the run and command locks of every
    intent."""
    assert connection.in_atomic_block, "record_dispatched_statement needs an open transaction"
    return _RECORD_DISPATCHED, {"rows": json.dumps([job.row() for job in jobs]), "now": now}
