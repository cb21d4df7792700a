"""Stable hashes of JSON values, used for idempotency checks (same key, same payload?)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def stable_hash(value: Any) -> str:
    """`sha256:<hex>` of the canonical JSON of `value`."""
    digest = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    return f"sha256:{digest}"


def secret_digest(secret: str) -> str:
    """Digest of an API key. Keys carry 256 random bits, so a fast hash is enough."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()
