"""Identifiers: a type prefix and a time-ordered random part (`run_01JD…`).

The random part is a ULID (48-bit millisecond timestamp, 80 random bits, Crockford
base32), so ids of one type sort by creation time and are safe to make on any process.
"""

from __future__ import annotations

import os
import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MAX_ID_LENGTH = 200
# Every pair of digits, indexed by the 10 bits it spells: the 130 bits of a ULID (two
# leading zero bits, the 48-bit time, the 80 random bits) are 13 lookups, where a digit at
# a time (`divmod` by 32, 26 times) was ~10 µs of every id, one per event appended (issue 18).
_PAIRS = [high + low for high in _ALPHABET for low in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))


def ulid_digits(value: int) -> str:
    """The 26 Crockford base32 digits of a 128-bit value, most significant first."""
    pairs = _PAIRS
    return "".join([pairs[(value >> shift) & 1023] for shift in _SHIFTS])


def new_id(prefix: str) -> str:
    """Return a new id such as `run_01JD3K…` for the given type prefix."""
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{ulid_digits((millis << 80) | secrets.randbits(80))}"


def new_ids(prefix: str, count: int) -> list[str]:
    """`count` new ids of one type at once, each as `new_id` makes it: one clock read and one
    read of the system's random source for all of them, where `new_id` pays a `getrandom`
    call each (~1.5 µs; a dispatch batch mints an event id per item, issue 18 cell 3)."""
    stamp = (time.time_ns() // 1_000_000) << 80
    pool = int.from_bytes(os.urandom(10 * count))
    return [f"{prefix}_{ulid_digits(stamp | (pool >> (80 * i)) & _RANDOM)}" for i in range(count)]


_RANDOM = (1 << 80) - 1
