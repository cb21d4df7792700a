"""The outbox's raw SQL that takes no lock: the relay's retry statement, plus the shape of
a claimed record that every relay statement reads. (The writer's statement takes the key
lock, so it is `outbox.locks.insert_outbox_records`.)

- `retry_claims` sends a batch back to retry in one statement, every row fenced by its
  claim's (id, lease owner, attempt count) and a live lease; it runs in the relay's settle
  transaction. `agentrun.leased_batches.settle_by_tokens` runs it (and
  `outbox.locks.complete_claims`) over the batch's tokens in one round trip.

Why raw SQL: this is the measured hot path (a relay batch is a claim and two settle
statements, whatever its size). The ORM cannot express an `UPDATE … FROM` a set of rows
that gives every row its own fencing token. Statements that lock rows (the claim's `SKIP
LOCKED`, the completion's `FOR UPDATE`) are in `outbox.locks`, as house rule 8 requires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from agentrun.leased_batches import settle_by_tokens


class ClaimedRecord(NamedTuple):
    """One leased outbox record: what the relay sends, and its fencing token (id,
    lease_owner, attempt_count). A tuple: a claim makes hundreds at a time."""

    id: str
    event_id: str
    run_id: str
    topic: str
    partition_key: str
    outbox_seq: int
    attempt_count: int
    lease_owner: str
    value: str  # the envelope's JSON text, as PostgreSQL prints the jsonb column
    headers: dict[str, Any]

    def token(self, **settle: Any) -> dict[str, Any]:
        """The fencing token a settle UPDATE matches the row on, with what it sets."""
        return {
            "id": self.id,
            "lease_owner": self.lease_owner,
            "attempt_count": self.attempt_count,
            **settle,
        }


# Back to retry (seed `retryKafkaEventOutbox`): each row fenced by its own token, given its
# own error and its key's backoff. No row lock beyond the UPDATE's own: a refused row is
# simply not matched.
_RETRY_SQL = """
UPDATE agentrun_kafka_event_outbox o
SET lease_owner = NULL,
    lease_expires_at = NULL,
    next_attempt_at = statement_timestamp() + (token.delay_ms * interval '1 millisecond'),
    last_error = token.last_error,
    updated_at = statement_timestamp()
FROM jsonb_to_recordset(%(tokens)s::jsonb)
  AS token(id text, lease_owner text, attempt_count int, delay_ms int, last_error jsonb)
WHERE o.id = token.id
  AND o.lease_owner = token.lease_owner
  AND o.attempt_count = token.attempt_count
  AND o.delivered_at IS NULL
  AND o.lease_expires_at > statement_timestamp()
RETURNING o.id
"""


@dataclass(frozen=True)
class Retry:
    """One claim to send back to retry after `delay_ms`, recording `last_error`."""

    claim: ClaimedRecord
    delay_ms: int
    last_error: dict[str, Any]


def retry_claims(retries: list[Retry]) -> set[str]:
    """Release the claims whose token holds for a retry after their delay; returns their
    ids. Must be called inside the settle transaction."""
    tokens = [r.claim.token(delay_ms=r.delay_ms, last_error=r.last_error) for r in retries]
    return {row[0] for row in settle_by_tokens(_RETRY_SQL, tokens)}
