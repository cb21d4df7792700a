"""What the two relays share: batches of rows leased per ordering key and settled by token.

The outbox relay (records → Kafka) and the webhook relay (deliveries → HTTP) work the same
way (house rule 19): a claim leases, per ordering key, the due *prefix* of the key's
undelivered rows and commits; the I/O runs with no transaction open; a settle records each
row's outcome in one set-based `UPDATE`, every row fenced by its claim's token. The parts
of that which are the same logic for both are here:

- `unbroken_prefixes`: a claim's rows (in claim order, each with its place in its key)
  up to the first gap in each key, so what a relay sends is always a prefix of its key;
- `settle_by_tokens`: one settle statement over the batch's tokens, bound as one JSON text
  (`%(tokens)s::jsonb`), in one round trip;
- `BatchCounts`: the counts every relay batch reports.

Each relay's statements stay in its app (`outbox/locks.py`, `outbox/sql.py`,
`webhooks/locks.py`, `webhooks/sql.py`): their tables, keys and tokens differ.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Self, TypeVar

from agentrun.raw_sql import fetch_rows, json_param

Row = TypeVar("Row")


def unbroken_prefixes(
    rows: Sequence[Row], *, key: Callable[[Row], Hashable], offset: Callable[[Row], int]
) -> list[Row]:
    """The rows (in claim order) that continue their key from offset 1 without a gap: a
    row missing from a key (another claimer holds it, or it was not due) ends that key."""
    expected: dict[Hashable, int] = {}
    kept = []
    for row in rows:
        row_key, row_offset = key(row), offset(row)
        if expected.get(row_key, 1) == row_offset:
            expected[row_key] = row_offset + 1
            kept.append(row)
        else:
            expected[row_key] = -1  # nothing more of this key
    return kept


def settle_by_tokens(sql: str, tokens: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Run a settle statement over its claims' tokens (`%(tokens)s::jsonb`); the rows it
    returned (one per claim whose token held). Needs the settle's transaction."""
    if not tokens:
        return []
    return fetch_rows(sql, {"tokens": json_param(tokens)})


@dataclass(frozen=True)
class BatchCounts:
    """What one relay batch did: rows claimed, delivered, and refused at the settle (the
    token no longer held: the lease lapsed, or another worker owns the row now). Each relay
    adds its own outcomes."""

    claimed: int = 0
    delivered: int = 0
    refused: int = 0

    def __add__(self, other: Self) -> Self:
        return type(self)(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
