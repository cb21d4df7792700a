"""Locks of the webhooks app: the relay's claim, which locks the deliveries it leases.

`claim_due_deliveries` leases, per ordering key (endpoint, partition key), only the *prefix*
of undelivered deliveries that are due and unleased, up to `per_key` of them, for enabled
endpoints, breadth first (every key's first delivery, oldest key first, then every key's
second, …), so a batch spreads over as many keys as it can and its senders stay busy.
The candidates are locked `FOR UPDATE OF d SKIP LOCKED` (a
concurrent claimer takes other keys instead of waiting); a key whose head another claimer
holds loses its later rows too, so what is leased is always a prefix of its key, and a
later delivery is never sent before an earlier one is delivered. Must run in a short
transaction of its own that commits before any HTTP request.

Raw SQL because the ORM cannot lock rows joined to a window-function subquery (the running
`bool_and` that finds each key's due prefix).
"""

from __future__ import annotations

from typing import NamedTuple

from agentrun.leased_batches import unbroken_prefixes
from agentrun.raw_sql import fetch_rows
from webhooks.models import WebhookEndpoint

_CANDIDATES_SQL = """
SELECT d.seq, d.endpoint_id, d.partition_key, picked.key_offset
FROM agentrun_webhook_deliveries d
JOIN (
  SELECT ranked.seq, ranked.key_offset
  FROM (
    SELECT item.seq,
           row_number() OVER key_order AS key_offset,
           bool_and(item.next_attempt_at <= statement_timestamp()
                    AND (item.lease_expires_at IS NULL
                         OR item.lease_expires_at <= statement_timestamp()))
             OVER key_order AS prefix_due
    FROM agentrun_webhook_deliveries item
    JOIN agentrun_webhook_endpoints endpoint ON endpoint.id = item.endpoint_id
    WHERE item.delivered_at IS NULL AND endpoint.enabled
    WINDOW key_order AS (PARTITION BY item.endpoint_id, item.partition_key ORDER BY item.seq)
  ) ranked
  WHERE ranked.prefix_due AND ranked.key_offset <= %(per_key)s
  ORDER BY ranked.key_offset, ranked.seq
  LIMIT %(limit)s
) picked ON picked.seq = d.seq
WHERE d.delivered_at IS NULL
  AND d.next_attempt_at <= statement_timestamp()
  AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= statement_timestamp())
ORDER BY d.seq
FOR UPDATE OF d SKIP LOCKED
"""

_LEASE_SQL = """
UPDATE agentrun_webhook_deliveries
SET lease_owner = %(owner)s,
    lease_expires_at = clock_timestamp() + (%(lease_ms)s * interval '1 millisecond')
WHERE seq = ANY(%(seqs)s::bigint[])
RETURNING seq, endpoint_id, partition_key, event_id, run_id, attempt_count, lease_owner
"""


class Claim(NamedTuple):
    """One leased delivery; (seq, lease_owner) is its fencing token."""

    seq: int
    endpoint_id: str
    partition_key: str
    event_id: str
    run_id: str
    attempt_count: int
    lease_owner: str


def claim_due_deliveries(*, owner: str, lease_ms: int, limit: int, per_key: int) -> list[Claim]:
    """Lease each key's due prefix to `owner`; the claims in `seq` order. Must run inside
    the claim's own short transaction (the row locks are held until it commits)."""
    candidates = fetch_rows(_CANDIDATES_SQL, {"per_key": per_key, "limit": max(1, limit)})
    # A candidate skipped because another claimer holds it ends its key here.
    prefixes = unbroken_prefixes(candidates, key=lambda row: row[1:3], offset=lambda row: row[3])
    if not prefixes:
        return []
    lease = {"owner": owner, "lease_ms": lease_ms, "seqs": [row[0] for row in prefixes]}
    return [Claim._make(row) for row in sorted(fetch_rows(_LEASE_SQL, lease))]


def lock_endpoint(endpoint_id: str) -> WebhookEndpoint | None:
    """The endpoint row, locked `FOR NO KEY UPDATE` (deliveries reference it) until the
    caller's transaction ends; None when there is none."""
    return WebhookEndpoint.objects.select_for_update(no_key=True).filter(pk=endpoint_id).first()
