"""The one retry backoff: capped exponential with "equal jitter".

Attempt n waits a random whole number of milliseconds between half and all of
`min(cap_ms, base_ms * 2**(n-1))`: delays grow from one attempt to the next, never pass the
cap, and workers that failed together (a broker outage, a launcher down) do not retry
together. Runner dispatch and the outbox relay both back off with it, each with its own
base and cap settings.

The exponent is bounded by the cap's bit length, past which the doubled base exceeds the
cap whatever the base: an attempt count in the thousands (a record retried through a long
outage) costs no more than the tenth, and no huge integer is built.
"""

from __future__ import annotations

import random


def backoff_ms(attempt_count: int, *, base_ms: int, cap_ms: int) -> int:
    """The delay before attempt `attempt_count + 1`, in milliseconds (see module doc)."""
    exponent = min(max(attempt_count - 1, 0), max(cap_ms, 1).bit_length())
    ceiling = max(min(cap_ms, base_ms << exponent), 0)  # a shift: `**` is typed Any
    half = ceiling // 2
    return half + random.randint(0, ceiling - half)  # jitter: no secret, any PRNG will do
