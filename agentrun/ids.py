"""Identifiers: a type prefix and a time-ordered random part (`run_01JD…`).

The random part is a ULID (48-bit millisecond timestamp, 80 random bits, Crockford
base32), so ids of one type sort by creation time and are safe to make on any process.
"""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MAX_ID_LENGTH = 200


def _base32(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, index = divmod(value, 32)
        chars.append(_ALPHABET[index])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """Return a new id such as `run_01JD3K…` for the given type prefix."""
    millis = time.time_ns() // 1_000_000
    return f"{prefix}_{_base32(millis, 10)}{_base32(secrets.randbits(80), 16)}"
