"""Locks of the outbox: the writer's records, which take the key lock, and the relay's
claim and completion statements, which lock the rows they lease or settle.

- `records_ctes` is the writer's part of the event append's statement: it takes the
  per-(topic, partition key) transaction advisory locks, then draws the records'
  `outbox_seq` values and inserts them (no round trip of its own). The lock is held
  until the writer commits, so a second writer of the same key draws larger values only
  after the first committed: within a key, `outbox_seq` order is commit order, and the
  relay never sees a later record of a key committed while an earlier one is still
  invisible. Lock order: the run row, the session row, then this lock (always last).
- `claim_due_records` is the seed's `claimKafkaEventOutbox`: per key, only the *prefix* of
  due, unleased, undelivered records is claimed, with `FOR UPDATE … SKIP LOCKED`, and the
  lease is set in the same statement. It must run in its own short transaction that
  commits before any Kafka I/O.
- `complete_claims` settles a batch's acknowledged records in one statement, every row
  fenced by its claim's (id, lease owner, attempt count) and a live lease, after locking
  each key's head `FOR UPDATE`; it runs in the relay's settle transaction.

The relay's statement that takes no lock (the retry `UPDATE`) is in `outbox.sql`. Raw SQL
here because the ORM cannot express a recursive skip scan, window functions over a
`LATERAL` join, `FOR UPDATE OF … SKIP LOCKED` inside a CTE feeding an
`UPDATE … RETURNING`, or an `UPDATE … FROM …` from a set of rows that gives every row its
own fencing token.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from agentrun.leased_batches import settle_by_tokens, unbroken_prefixes
from agentrun.raw_sql import fetch_rows, json_param
from outbox.models import OUTBOX_SEQUENCE
from outbox.sql import ClaimedRecord

logger = logging.getLogger("outbox.relay")
MAX_CLAIM = 2_000
RECORDS_PER_KEY = 8  # a claim takes a key's records 8 at a time before it goes deeper


# The writer's records, as CTEs of the event append's own statement (`runs.sql.insert_events`
# composes them after its `base` and `sess` CTEs; issue 18: the records were a statement of
# their own, and before that three). They were the second statement of every append with
# the outbox on: a round trip and ~0.2 ms of CPU (bench cell 1, `1.outbox.8w`).
# - `obx_locked` takes the (topic, partition key) lock of every key, in the keys' order
#   (sorted by the caller): its one-time filter reads every row `sess` returns first, so
#   every session row is locked before the first key lock, as the lock order wants;
# - `obx_drawn` draws one sequence value per record in the records' order, gated by a
#   one-time filter that counts every `obx_locked` row, so no value is drawn before every
#   key lock is held (which is what orders a key's values by commit);
# - `obx` inserts the records; an event's seq is only known in the statement (`base`'s
#   last seq + the event's offset `k`), so it is set here in the value's `data.seq` and in
#   the `seq` header, and each record's `outbox_seq` is added to its headers.
# `next_attempt_at` keeps the column default (due at once). The lock's key is the seed's,
# (hashtext(topic), hashtext(partition key)), as `agentrun.locks.advisory_xact_lock_on`
# spells it.
RECORDS_CTES = """\
obx_locked AS MATERIALIZED (
  SELECT pg_advisory_xact_lock(hashtext(%(obx_topic)s), hashtext(k.key))
  FROM jsonb_array_elements_text(%(obx_keys)s::jsonb) AS k(key)
  WHERE (SELECT count(*) FROM sess) >= 0
),
obx_drawn AS MATERIALIZED (
  SELECT r.rec, r.ord, nextval(%(obx_sequence)s::regclass) AS outbox_seq
  FROM jsonb_array_elements(%(obx_records)s::jsonb) WITH ORDINALITY AS r(rec, ord)
  WHERE (SELECT count(*) FROM obx_locked) > 0
),
obx AS (
  INSERT INTO agentrun_kafka_event_outbox
    (id, outbox_seq, event_id, run_id, source_seq, topic, partition_key, value, headers,
     attempt_count, created_at, updated_at)
  SELECT d.rec->>'id', d.outbox_seq, d.rec->>'event_id', b.run_id,
         b.seq + (d.rec->>'k')::int, %(obx_topic)s, d.rec->>'partition_key',
         jsonb_set(d.rec->'value', '{data,seq}', to_jsonb(b.seq + (d.rec->>'k')::int)),
         d.rec->'headers' || jsonb_build_object(
           'seq', (b.seq + (d.rec->>'k')::int)::text, 'outbox_seq', d.outbox_seq::text),
         0, %(now)s::timestamptz, %(now)s::timestamptz
  FROM obx_drawn d JOIN base b ON b.run_id = d.rec->>'run_id'
  ORDER BY d.ord
)"""


def records_ctes(
    *, topic: str, keys: list[str], records: list[dict[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """The CTEs that record `records` under the locks of `keys` (sorted, each once), and
    their parameters (`now` is the events statement's own). Each record: `id`,
    `event_id`, `run_id`, `k` (its event's offset in its run's batch), `partition_key`,
    `value` and `headers` (their `seq` set, and `outbox_seq` added, by the statement), in
    key order, each key's in its events' order. Runs in the writer's transaction, after
    its run locks."""
    return RECORDS_CTES, {
        "obx_topic": topic,
        "obx_keys": json_param(keys),
        "obx_sequence": OUTBOX_SEQUENCE,
        "obx_records": json_param(records),
    }


# The seed's claim takes the due, unleased prefix of each key, keys served round robin,
# the oldest key heads first. Here a claim takes each key's prefix RECORDS_PER_KEY records
# at a time: the oldest keys' first 8 records, key after key, until `limit`; only when the
# keys run out does it go deeper, round robin over the keys that had 8. So a claim of 1,000
# over 500 deep keys holds 125 of them: a second relay worker (or the same loop's next
# batch) finds other keys to claim, and a worker that dies holding a claim stops only its
# keys until the lease lapses, where round robin from the first record on leased the head
# of every key. Many shallow keys, or one deep key, still fill the batch. The cost grows
# with the number of keys that have undelivered records, not with the records:
# - `heads` is a skip scan over the pending key-order index (`(topic, partition_key,
#   outbox_seq) WHERE delivered_at IS NULL`): one index probe per key finds the key's
#   head, then jumps past the key (PostgreSQL has no native skip scan; the seed's DISTINCT
#   ON read every undelivered row);
# - heads due and unleased in the statement's snapshot are locked oldest first, SKIP
#   LOCKED, so a concurrent claimer takes the next keys instead of waiting or coming back
#   empty; the lock re-checks delivery and lease on the row's latest version. CTEs are
#   read only as far as their reader needs: `first_records` stops at `limit`, so only the
#   keys it reaches are joined and locked (`due_heads` is sorted once; the nested loop
#   keeps that order, which decides which keys go first, never what a claim may take);
# - `first_records` reads at most 8 records per key (one index range) and keeps them up
#   to the first that is not due or is leased; `deeper` continues the keys that had 8,
#   breadth first, one index probe per record, for whatever `limit` has left;
# - the UPDATE finds each picked row by the ctid its index scan saw (no second index
#   lookup) and re-checks it; a row updated meanwhile has moved, so it is left out. No
#   other claimer can hold a row of a key whose head this statement locked, so every
#   key's rows are leased from its head on without a gap; `claim_due_records` still
#   checks the offsets it gets back and never sends a row after a gap (it would wait for
#   its lease to lapse), so a claim sent is always a prefix of its key.
_CLAIM_SQL = """
WITH RECURSIVE heads AS (
  (SELECT o.id, o.topic, o.partition_key, o.outbox_seq, o.next_attempt_at, o.lease_expires_at
   FROM agentrun_kafka_event_outbox o
   WHERE o.delivered_at IS NULL
   ORDER BY o.topic, o.partition_key, o.outbox_seq
   LIMIT 1)
  UNION ALL
  SELECT following.*
  FROM heads
  CROSS JOIN LATERAL (
    SELECT o.id, o.topic, o.partition_key, o.outbox_seq, o.next_attempt_at, o.lease_expires_at
    FROM agentrun_kafka_event_outbox o
    WHERE o.delivered_at IS NULL
      AND (o.topic, o.partition_key) > (heads.topic, heads.partition_key)
    ORDER BY o.topic, o.partition_key, o.outbox_seq
    LIMIT 1
  ) following
), due_heads AS MATERIALIZED (
  SELECT heads.id, heads.outbox_seq
  FROM heads
  WHERE heads.next_attempt_at <= now()
    AND (heads.lease_expires_at IS NULL OR heads.lease_expires_at <= now())
  ORDER BY heads.outbox_seq
), locked_heads AS MATERIALIZED (
  SELECT candidate.id, candidate.topic, candidate.partition_key, candidate.outbox_seq
  FROM due_heads
  JOIN agentrun_kafka_event_outbox candidate ON candidate.id = due_heads.id
  WHERE candidate.delivered_at IS NULL
    AND candidate.next_attempt_at <= now()
    AND (candidate.lease_expires_at IS NULL OR candidate.lease_expires_at <= now())
  FOR UPDATE OF candidate SKIP LOCKED
), first_records AS MATERIALIZED (
  SELECT prefix.id, prefix.row_ctid, prefix.topic, prefix.partition_key, prefix.outbox_seq,
         prefix.key_offset
  FROM locked_heads
  CROSS JOIN LATERAL (
    SELECT ranked.id, ranked.row_ctid, ranked.topic, ranked.partition_key,
           ranked.outbox_seq, ranked.key_offset
    FROM (
      SELECT item.id, item.row_ctid, item.topic, item.partition_key, item.outbox_seq,
             row_number() OVER key_order AS key_offset,
             bool_and(item.next_attempt_at <= now()
                      AND (item.lease_expires_at IS NULL OR item.lease_expires_at <= now()))
               OVER key_order AS prefix_due
      FROM (
        SELECT key_item.id, key_item.ctid AS row_ctid, key_item.topic,
               key_item.partition_key, key_item.outbox_seq, key_item.next_attempt_at,
               key_item.lease_expires_at
        FROM agentrun_kafka_event_outbox key_item
        WHERE key_item.topic = locked_heads.topic
          AND key_item.partition_key = locked_heads.partition_key
          AND key_item.delivered_at IS NULL
        ORDER BY key_item.outbox_seq
        LIMIT %(per_key)s
      ) item
      WINDOW key_order AS (ORDER BY item.outbox_seq)
    ) ranked
    WHERE ranked.prefix_due
  ) prefix
  LIMIT %(limit)s
), deeper AS (
  (SELECT first_records.id, first_records.row_ctid, first_records.topic,
          first_records.partition_key, first_records.outbox_seq, first_records.key_offset
   FROM first_records
   WHERE first_records.key_offset = %(per_key)s
   ORDER BY first_records.outbox_seq)
  UNION ALL
  SELECT following.id, following.row_ctid, following.topic, following.partition_key,
         following.outbox_seq, deeper.key_offset + 1
  FROM deeper
  CROSS JOIN LATERAL (
    SELECT item.id, item.ctid AS row_ctid, item.topic, item.partition_key, item.outbox_seq,
           item.next_attempt_at, item.lease_expires_at
    FROM agentrun_kafka_event_outbox item
    WHERE item.topic = deeper.topic
      AND item.partition_key = deeper.partition_key
      AND item.delivered_at IS NULL
      AND item.outbox_seq > deeper.outbox_seq
    ORDER BY item.outbox_seq
    LIMIT 1
  ) following
  WHERE following.next_attempt_at <= now()
    AND (following.lease_expires_at IS NULL OR following.lease_expires_at <= now())
), picked AS MATERIALIZED (
  SELECT first_records.id, first_records.row_ctid, first_records.key_offset
  FROM first_records
  UNION ALL
  (SELECT deeper.id, deeper.row_ctid, deeper.key_offset
   FROM deeper
   WHERE deeper.key_offset > %(per_key)s
   LIMIT greatest(%(limit)s - (SELECT count(*) FROM first_records), 0))
)
UPDATE agentrun_kafka_event_outbox o
SET attempt_count = o.attempt_count + 1,
    lease_owner = %(owner)s,
    lease_expires_at = clock_timestamp() + (%(lease_ms)s * interval '1 millisecond'),
    updated_at = clock_timestamp()
FROM picked
WHERE o.ctid = picked.row_ctid
  AND o.id = picked.id
  AND o.delivered_at IS NULL
  AND o.next_attempt_at <= now()
  AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
RETURNING o.id, o.event_id, o.run_id, o.topic, o.partition_key, o.outbox_seq,
          o.attempt_count, o.lease_owner, o.value, o.headers, picked.key_offset
"""


def claim_due_records(*, owner: str, lease_ms: int, limit: int) -> list[ClaimedRecord]:
    """Lease the due prefix of each key to `owner`; returns the claims in `outbox_seq` order.

    Must run inside a short transaction of its own (the row locks are held until it
    commits). Each returned record's (id, lease_owner, attempt_count) is its fencing token.
    """
    params = {
        "limit": max(1, min(limit, MAX_CLAIM)),
        "per_key": RECORDS_PER_KEY,
        "owner": owner,
        "lease_ms": lease_ms,
    }
    rows = sorted(fetch_rows(_CLAIM_SQL, params), key=lambda row: row[5])  # outbox_seq
    # The claim's locks rule a gap out; should one ever appear, the rows after it are not
    # sent and come back when their lease lapses.
    kept = unbroken_prefixes(rows, key=lambda row: (row[3], row[4]), offset=lambda row: row[10])
    if len(kept) < len(rows):
        logger.warning("outbox claim had a gap: %d leased records held back", len(rows) - len(kept))
    # Plain records, not model instances: building 500 models costs more than the claim's
    # SQL, and the relay only sends them. Django's connection reads jsonb as text, which is
    # what goes to Kafka (`outbox.services.relay.message_of`), so only headers are decoded,
    # all of a batch's in one `json.loads` (per call, the decoder's setup cost more than
    # the small header objects: ~4 us of the relay's ~30-50 us of Python per record).
    headers = json.loads("[" + ",".join([row[9] for row in kept]) + "]") if kept else []
    return [ClaimedRecord._make((*row[:9], h)) for row, h in zip(kept, headers, strict=True)]


# Completion of acknowledged records (seed `completeKafkaEventOutbox`), for a whole batch.
# `key_offset` numbers each key's acknowledged claims 1, 2, ... in `outbox_seq` order. A row
# is completed only when its own token still holds (same owner and attempt, undelivered,
# live lease) and so does every earlier claim of its key in the batch: the row number among
# the live rows of the key must equal its offset. So a refused claim stops its key, and a
# later record is never marked delivered before an earlier one.
# Only each key's first claim (offset 1, the key's head: a claim is a prefix of its key) is
# locked, `FOR UPDATE` in id order, and a key is settled only if its head's token holds on
# the head's latest version. That is enough: a claim takes a key's rows only after locking
# its head (`_CLAIM_SQL`), so while this statement holds the head no claim can take any
# row of the key, and one that took the head first (our lease lapsed meanwhile) made the
# head's check fail, so none of the key's rows is completed. Locking every row cost a lock
# record per row (1,000 per batch) for nothing more. Rows are updated by their ctid (no
# second index lookup per row); the UPDATE re-checks each token, because a row changed
# after the snapshot (only an operator's release can touch an unlocked row, and only once
# its lease lapsed) is re-read at its latest version, which a ctid condition alone does
# not re-check.
_COMPLETE_SQL = """
WITH token AS (
  SELECT * FROM jsonb_to_recordset(%(tokens)s::jsonb)
    AS t(id text, lease_owner text, attempt_count int, key_no int, key_offset int)
), heads AS MATERIALIZED (
  SELECT token.key_no
  FROM token
  JOIN agentrun_kafka_event_outbox o ON o.id = token.id
  WHERE token.key_offset = 1
    AND o.lease_owner = token.lease_owner
    AND o.attempt_count = token.attempt_count
    AND o.delivered_at IS NULL
    AND o.lease_expires_at > statement_timestamp()
  ORDER BY o.id
  FOR UPDATE OF o
), live AS MATERIALIZED (
  SELECT token.id, token.key_no, token.key_offset, token.lease_owner, token.attempt_count,
         o.ctid AS row_ctid
  FROM token
  JOIN agentrun_kafka_event_outbox o ON o.id = token.id
  WHERE token.key_no IN (SELECT heads.key_no FROM heads)
    AND o.lease_owner = token.lease_owner
    AND o.attempt_count = token.attempt_count
    AND o.delivered_at IS NULL
    AND o.lease_expires_at > statement_timestamp()
), unbroken AS (
  SELECT ranked.id, ranked.row_ctid, ranked.lease_owner, ranked.attempt_count
  FROM (
    SELECT live.id, live.row_ctid, live.key_offset, live.lease_owner, live.attempt_count,
           row_number() OVER (PARTITION BY live.key_no ORDER BY live.key_offset) AS live_offset
    FROM live
  ) ranked
  WHERE ranked.live_offset = ranked.key_offset
)
UPDATE agentrun_kafka_event_outbox o
SET delivered_at = statement_timestamp(),
    lease_owner = NULL,
    lease_expires_at = NULL,
    last_error = NULL,
    updated_at = statement_timestamp()
FROM unbroken
WHERE o.ctid = unbroken.row_ctid
  AND o.id = unbroken.id
  AND o.lease_owner = unbroken.lease_owner
  AND o.attempt_count = unbroken.attempt_count
  AND o.delivered_at IS NULL
RETURNING o.id
"""


@dataclass(frozen=True)
class Completion:
    """One acknowledged claim to complete: `key_no` tells keys apart within the batch,
    `key_offset` is the claim's place (from 1) among its key's acknowledged claims."""

    claim: ClaimedRecord
    key_no: int
    key_offset: int


def complete_claims(completions: list[Completion]) -> set[str]:
    """Mark delivered every acknowledged claim whose token holds and whose key's earlier
    claims in the batch hold too; returns the completed ids.

    Must be called inside the settle transaction: it locks each key's head (`FOR UPDATE`,
    in id order) until that transaction commits.
    """
    tokens = [c.claim.token(key_no=c.key_no, key_offset=c.key_offset) for c in completions]
    return {row[0] for row in settle_by_tokens(_COMPLETE_SQL, tokens)}
