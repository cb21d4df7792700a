"""The dispatch app's raw SQL that takes no lock of its own: a batch completion's write.

`record_dispatched_locked` is the write of `claims.complete_intents`: one statement saves
the batch's runner jobs and marks its intents `dispatched`, each intent pointing at the
job saved under its planned id. Before it was three ORM statements (a read of replays, a
`bulk_create` of `RunnerJob` instances, an UPDATE with three correlated subqueries) and
about a third of a batch's Python CPU (bench cell 3's profile; issue 18 item 1).

Why raw SQL: the ORM cannot say a data-modifying CTE, so the INSERT and the UPDATE would
be two round trips, and building model instances for rows nothing reads again was most
of their CPU. The rows travel as one JSON text (`jsonb_to_recordset`): client-side binding
of a dozen arrays cost more than the statement. Row locks (run → command → intent) are
the caller's (`dispatch.locks`), taken before this statement, which only writes rows the
caller holds or creates.

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

_RECORD_DISPATCHED_SQL = """\
WITH j AS MATERIALIZED (
  SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS j(
    intent_id text, id text, run_id text, command_id text, payload_hash text,
    attempt_id text, runner_id text, namespace text, job_name text, manager_url text,
    image text, source_commit text, service_account_name text, result jsonb, outcome text)
),
jobs AS (
  INSERT INTO agentrun_runner_jobs (
    id, run_id, command_id, idempotency_key, payload_hash, attempt_id, runner_id,
    namespace, job_name, manager_url, image, source_commit, service_account_name, result,
    created_at, updated_at)
  SELECT j.id, j.run_id, j.command_id, j.id, j.payload_hash, j.attempt_id, j.runner_id,
         j.namespace, j.job_name, j.manager_url, j.image, j.source_commit,
         j.service_account_name, j.result, %(now)s, %(now)s
  FROM j
  ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
)
UPDATE agentrun_runner_dispatch_intents i
SET state = 'dispatched', dispatch_outcome = j.outcome, dispatched_at = %(now)s,
    actual_runner_job_id = j.id, active_runner_id = j.runner_id, updated_at = %(now)s,
    -- the claim's lease ends with the dispatch
    lease_owner = NULL, lease_expires_at = NULL, last_error = NULL
FROM j
WHERE i.id = j.intent_id
"""


@dataclass(frozen=True)
class DispatchedJob:
    """One launched intent's runner job, as its row is written (`result` redacted)."""

    intent_id: str
    id: str  # the intent's planned runner job id, also the job's idempotency key
    run_id: str
    payload_hash: str
    result: dict[str, Any]
    outcome: str | None
    # The job's other columns, named as they are (`runs.services.runners.RunnerJobSpec`):
    # command_id, attempt_id, runner_id, namespace, job_name, manager_url, image, ...
    columns: dict[str, Any]

    def row(self) -> dict[str, Any]:
        fields = {name: value for name, value in vars(self).items() if name != "columns"}
        return {**self.columns, **fields}


def record_dispatched_locked(jobs: list[DispatchedJob], *, now: datetime) -> None:
    """Save the jobs and mark their intents dispatched, in one statement. Needs the
    caller's transaction and the claim locks of every intent (run, command, intent)."""
    assert connection.in_atomic_block, "record_dispatched_locked needs an open transaction"
    rows = json.dumps([job.row() for job in jobs])
    with connection.cursor() as cursor:
        cursor.execute(_RECORD_DISPATCHED_SQL, {"rows": rows, "now": now})
