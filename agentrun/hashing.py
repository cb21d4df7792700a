"""Stable hashes of JSON values, used for idempotency checks (same key, same payload?)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# `json.dumps` with any argument not its default builds a new encoder on every call (a
# third of a small value's canonical text; a dispatch batch hashes each job's spec, issue
# 18): one encoder, the same text.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text."""
    return _CANONICAL.encode(value)


def stable_hash(value: Any) -> str:
    """`sha256:<hex>` of the canonical JSON of `value`."""
    digest = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"


def secret_digest(secret: str) -> str:
    """Digest of an API key. Keys carry 256 random bits, so a fast hash is enough."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
