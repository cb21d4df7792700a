"""The webhooks app's raw SQL that takes no lock: the append's delivery insert, a replay's
copy, and the relay's settle statement. (The claim, which locks rows, is in
`webhooks.locks`, as house rule 8 requires.)

Why raw SQL: each is one set-based statement where the ORM would need one query per row
or per endpoint: an `INSERT … SELECT` over `unnest`ed arrays joined to the endpoints (the
append's hot path, which must cost one round trip), an `INSERT … SELECT` in `seq` order,
and an `UPDATE … FROM jsonb_to_recordset` that gives every row its own fencing token and
outcome.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentrun.leased_batches import settle_by_tokens
from agentrun.raw_sql import fetch_rows, row_count

# Matching endpoints per event, in event order (then endpoint id), so the identity values
# follow the append's order within every (endpoint, key).
_INSERT_SQL = """
INSERT INTO agentrun_webhook_deliveries
  (endpoint_id, event_id, run_id, event_type, partition_key, attempt_count,
   last_response, last_error)
SELECT endpoint.id, ev.event_id, ev.run_id, ev.event_type, ev.partition_key, 0, '', ''
FROM unnest(%(event_ids)s::text[], %(types)s::text[], %(run_ids)s::text[],
            %(tenants)s::text[], %(keys)s::text[])
       WITH ORDINALITY AS ev(event_id, event_type, run_id, tenant_id, partition_key, n)
JOIN agentrun_webhook_endpoints endpoint
  ON endpoint.tenant_id = ev.tenant_id
 AND endpoint.enabled
 AND (endpoint.event_types ? '*' OR endpoint.event_types ? ev.event_type)
ORDER BY ev.n, endpoint.id
"""


def insert_deliveries(
    *,
    event_ids: list[str],
    event_types: list[str],
    run_ids: list[str],
    tenant_ids: list[str],
    keys: list[str],
) -> int:
    """Insert the deliveries of a batch of events; returns how many rows were written."""
    arrays = {"event_ids": event_ids, "types": event_types, "run_ids": run_ids}
    return row_count(_INSERT_SQL, {**arrays, "tenants": tenant_ids, "keys": keys})


# A replay: new deliveries (same events, same webhook-id) of what the endpoint had matched
# after the cursor, originals only, in their order, at most `limit`.
_REPLAY_SQL = """
INSERT INTO agentrun_webhook_deliveries
  (endpoint_id, event_id, run_id, event_type, partition_key, attempt_count,
   last_response, last_error, replay_of)
SELECT original.endpoint_id, original.event_id, original.run_id, original.event_type,
       original.partition_key, 0, '', '', original.seq
FROM agentrun_webhook_deliveries original
WHERE original.endpoint_id = %(endpoint_id)s
  AND original.replay_of IS NULL
  AND original.seq > %(after_seq)s
  AND original.created_at > %(after_time)s
ORDER BY original.seq
LIMIT %(limit)s
RETURNING replay_of
"""


def insert_replay(
    *, endpoint_id: str, after_seq: int, after_time: datetime, limit: int
) -> list[int]:
    """Copy the endpoint's original deliveries after the cursor; the originals' seqs."""
    cursor_at = {"after_seq": after_seq, "after_time": after_time}
    rows = fetch_rows(_REPLAY_SQL, {"endpoint_id": endpoint_id, **cursor_at, "limit": limit})
    return sorted(int(row[0]) for row in rows)


# The settle of a batch: each claim fenced by its lease owner and a live lease; `outcome`
# is `delivered`, `failed` (an attempt that failed: back off) or `released` (not attempted
# because an earlier delivery of its key failed: it stays due after its head).
_SETTLE_SQL = """
UPDATE agentrun_webhook_deliveries d
SET lease_owner = NULL,
    lease_expires_at = NULL,
    attempt_count = d.attempt_count + CASE WHEN t.outcome = 'released' THEN 0 ELSE 1 END,
    delivered_at = CASE WHEN t.outcome = 'delivered' THEN statement_timestamp() END,
    next_attempt_at = CASE WHEN t.outcome = 'failed'
        THEN statement_timestamp() + (t.delay_ms * interval '1 millisecond')
        ELSE d.next_attempt_at END,
    last_status_code = CASE WHEN t.outcome = 'released' THEN d.last_status_code
        ELSE t.status_code END,
    last_response = CASE WHEN t.outcome = 'released' THEN d.last_response ELSE t.response END,
    last_error = CASE WHEN t.outcome = 'released' THEN d.last_error ELSE t.error END
FROM jsonb_to_recordset(%(tokens)s::jsonb)
  AS t(seq bigint, lease_owner text, outcome text, delay_ms int, status_code int,
       response text, error text)
WHERE d.seq = t.seq
  AND d.lease_owner = t.lease_owner
  AND d.delivered_at IS NULL
  AND d.lease_expires_at > statement_timestamp()
RETURNING d.seq, t.outcome
"""


def settle_deliveries(tokens: list[dict[str, Any]]) -> dict[int, str]:
    """Record a batch's outcomes; returns seq → outcome for the claims whose token held."""
    return {int(seq): str(outcome) for seq, outcome in settle_by_tokens(_SETTLE_SQL, tokens)}
