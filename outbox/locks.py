"""Locks and raw SQL of the outbox: the key lock, the sequence batch and the relay's claim.

- `lock_outbox_key` is the per-(topic, partition key) transaction advisory lock a writer
  takes before it draws `outbox_seq` values. It is held until the writer commits, so a
  second writer of the same key draws larger values only after the first committed: within
  a key, `outbox_seq` order is commit order, and the relay never sees a later record of a
  key committed while an earlier one is still invisible. Lock order: the run row, the
  session row, then this lock (always last).
- `reserve_outbox_seqs` draws a batch of values from the global sequence in one query.
- `claim_due_records` is the seed's `claimKafkaEventOutbox`: per key, only the *prefix* of
  due, unleased, undelivered records is claimed, with `FOR UPDATE … SKIP LOCKED`, and the
  lease is set in the same statement. It must run in its own short transaction that
  commits before any Kafka I/O.

Raw SQL lives here and nowhere else in the app: the ORM cannot express `nextval` on a
named sequence, `DISTINCT ON`, window functions over a `LATERAL` join, or `FOR UPDATE OF
… SKIP LOCKED` inside a CTE feeding an `UPDATE … RETURNING`.
"""

from __future__ import annotations

from django.db import connection

from agentrun.locks import LockKey, advisory_xact_lock
from outbox.models import OUTBOX_SEQUENCE, KafkaEventOutbox

MAX_CLAIM = 500


def lock_outbox_key(*, topic: str, partition_key: str) -> None:
    """Take the (topic, key) transaction advisory lock. Needs the writer's transaction.

    Kafka topic names cannot contain ':', so the joined value is unambiguous.
    """
    advisory_xact_lock(LockKey.OUTBOX_KEY, f"{topic}:{partition_key}")


def reserve_outbox_seqs(count: int) -> list[int]:
    """Draw `count` values of the global outbox sequence, ascending. Call it under the key
    lock so that the values of a key follow commit order."""
    with connection.cursor() as cursor:
        # Raw SQL: one round trip for the whole batch; the ORM has no nextval().
        cursor.execute(
            "SELECT nextval(%s::regclass) FROM generate_series(1, %s)",
            [OUTBOX_SEQUENCE, count],
        )
        return sorted(int(row[0]) for row in cursor.fetchall())


# The seed's claim, with two changes that keep its meaning:
# - the `delivered_at IS NULL` and lease checks are repeated in the locking CTEs, so that
#   PostgreSQL re-evaluates them on the row version it locks (a row may change between the
#   statement's snapshot and its lock);
# - the round-robin pick (`picked`) chooses the first `limit` due rows before any row is
#   locked, so only those rows are joined and locked, not every candidate of every prefix.
_CLAIM_SQL = """
WITH head_ids AS MATERIALIZED (
  SELECT DISTINCT ON (topic, partition_key) id
  FROM agentrun_kafka_event_outbox
  WHERE delivered_at IS NULL
  ORDER BY topic, partition_key, outbox_seq
), heads AS MATERIALIZED (
  SELECT candidate.topic, candidate.partition_key, candidate.outbox_seq
  FROM agentrun_kafka_event_outbox candidate
  JOIN head_ids ON head_ids.id = candidate.id
  WHERE candidate.delivered_at IS NULL
    AND candidate.next_attempt_at <= now()
    AND (candidate.lease_expires_at IS NULL OR candidate.lease_expires_at <= now())
  ORDER BY candidate.outbox_seq
  FOR UPDATE OF candidate SKIP LOCKED
  LIMIT %(limit)s
), prefix_candidates AS MATERIALIZED (
  SELECT candidate.id, candidate.topic, candidate.partition_key, candidate.outbox_seq,
         candidate.next_attempt_at, candidate.lease_expires_at
  FROM heads
  CROSS JOIN LATERAL (
    SELECT item.*
    FROM agentrun_kafka_event_outbox item
    WHERE item.topic = heads.topic
      AND item.partition_key = heads.partition_key
      AND item.delivered_at IS NULL
    ORDER BY item.outbox_seq
    LIMIT %(limit)s
  ) candidate
), ranked AS MATERIALIZED (
  SELECT prefix_candidates.id,
         prefix_candidates.outbox_seq,
         row_number() OVER key_order AS key_offset,
         bool_and(prefix_candidates.next_attempt_at <= now()
                  AND (prefix_candidates.lease_expires_at IS NULL
                       OR prefix_candidates.lease_expires_at <= now())) OVER key_order
           AS prefix_due
  FROM prefix_candidates
  WINDOW key_order AS (PARTITION BY prefix_candidates.topic, prefix_candidates.partition_key
                       ORDER BY prefix_candidates.outbox_seq)
), picked AS MATERIALIZED (
  SELECT ranked.id, ranked.key_offset, ranked.outbox_seq
  FROM ranked
  WHERE ranked.prefix_due
  ORDER BY ranked.key_offset ASC, ranked.outbox_seq ASC
  LIMIT %(limit)s
), due AS MATERIALIZED (
  SELECT candidate.id
  FROM picked
  JOIN agentrun_kafka_event_outbox candidate ON candidate.id = picked.id
  WHERE candidate.delivered_at IS NULL
    AND (candidate.lease_expires_at IS NULL OR candidate.lease_expires_at <= now())
  ORDER BY picked.key_offset ASC, picked.outbox_seq ASC
  FOR UPDATE OF candidate SKIP LOCKED
)
UPDATE agentrun_kafka_event_outbox o
SET attempt_count = o.attempt_count + 1,
    lease_owner = %(owner)s,
    lease_expires_at = clock_timestamp() + (%(lease_ms)s * interval '1 millisecond'),
    updated_at = clock_timestamp()
FROM due
WHERE o.id = due.id
RETURNING o.*
"""


def claim_due_records(*, owner: str, lease_ms: int, limit: int) -> list[KafkaEventOutbox]:
    """Lease the due prefix of each key to `owner`; returns the claims in `outbox_seq` order.

    Must run inside a short transaction of its own (the row locks are held until it
    commits). Each returned record's (id, lease_owner, attempt_count) is its fencing token.
    """
    params = {"limit": max(1, min(limit, MAX_CLAIM)), "owner": owner, "lease_ms": lease_ms}
    claimed = list(KafkaEventOutbox.objects.raw(_CLAIM_SQL, params))
    return sorted(claimed, key=lambda record: record.outbox_seq)
