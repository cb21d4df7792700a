"""Redaction of secrets in JSON before it is stored or logged.

A value is replaced when its key names a secret (token, password, api key, …) or when the
value itself looks like a credential (a bearer header, a provider key). Redaction is
applied to event payloads, runner metadata and recorded errors, so nothing a runner or a
backend reports can put a credential into the database, Kafka or the logs.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

_SECRET_KEY = re.compile(
    r"(pass(word|wd)?|secret|token|api[_-]?key|apikey|authorization|auth[_-]?header|"
    r"credential|private[_-]?key|access[_-]?key|session[_-]?key|cookie)",
    re.IGNORECASE,
)
# Keys that contain a secret-looking word but hold counts or ids, not secrets.
_SAFE_KEYS = frozenset(
    {
        "token_usage",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cached_input_tokens",
        "reasoning_output_tokens",
        "max_tokens",
        "tokens",
        "token_count",
        "cancel_request_id",
    }
)
_SECRET_VALUE = re.compile(
    r"(\bBearer\s+[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{16,}|\bghp_[A-Za-z0-9]{20,}|"
    r"\bxox[abp]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b|\bar_[a-z]+_[A-Za-z0-9_-]{20,})"
)


def is_secret_key(key: str) -> bool:
    return key.lower() not in _SAFE_KEYS and bool(_SECRET_KEY.search(key))


def redact_text(text: str) -> str:
    return _SECRET_VALUE.sub(REDACTED, text)


def redact_json(value: Any) -> Any:
    """Return a copy of `value` with secret-named keys and credential-like strings masked."""
    if isinstance(value, dict):
        return {
            key: REDACTED
            if is_secret_key(str(key)) and item not in (None, "")
            else redact_json(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
