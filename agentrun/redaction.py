"""Redaction of secrets in JSON before it is stored or logged.

A value is replaced when its key names a secret (token, password, api key, …) or when the
value itself looks like a credential (a bearer header, a provider key, a JWT, the password
of a DSN such as `postgres://user:pass@host`, or the value of a `NAME=value` line of an
environment dump whose name names a secret, as `env` or a crash report prints it; a
`DATABASE_URL=…` line is masked whole, the host names every tenant's data). Redaction is
applied to event payloads, runner metadata and recorded errors, so nothing a runner or a
backend reports can put a credential into the database, Kafka or the logs.
"""

from __future__ import annotations

import re
from functools import lru_cache
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
        "thread_total_tokens",
        # Budgets and quotas (SPEC §9.4): counts.
        "max_total_tokens",
        "turn_tokens",
        "run_tokens_before_turn",
        "reasoning_tokens",
        "max_tokens_per_day",
        "used_tokens",
        "cancel_request_id",
    }
)
_SECRET_VALUE = re.compile(
    r"(\bBearer\s+[A-Za-z0-9._~+/=-]{8,}|\bsk-[A-Za-z0-9_-]{16,}|\bghp_[A-Za-z0-9]{20,}|"
    r"\bxox[abp]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b|\bar_[a-z]+_[A-Za-z0-9_-]{20,})"
)

# The fixed part of each `_SECRET_VALUE` alternative, in its order.
_SECRET_VALUE_MARKERS = ("Bearer", "sk-", "ghp_", "xox", "AKIA", "ar_")

# A JSON Web Token: base64url `{"…` header and payload, and a signature (maybe empty).
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# `scheme://[user]:password@`: the password, up to the last `@` before the host.
_DSN_PASSWORD = re.compile(r"\b([a-z][a-z0-9+.-]*://[^:/@\s]*:)([^\s/]+)@", re.IGNORECASE)
# `NAME=value` (`export NAME=value`, quoted or not) at the start of a line or after a space.
_ENV_ASSIGNMENT = re.compile(
    r"(?<![^\s;,])([A-Za-z_][A-Za-z0-9_]*)=(\"[^\"\n]*\"|'[^'\n]*'|[^\s;,]+)"
)
# Names (of environment variables, of keys) whose value is a credential though they name no
# secret: a DSN carries the password and the host of every tenant's data.
_SECRET_URL_NAMES = re.compile(r"(database_url|dsn|broker_url|redis_url)$", re.IGNORECASE)


@lru_cache(maxsize=4096)  # the same few keys come back in every payload (bounded: keys are input)
def is_secret_key(key: str) -> bool:
    if key.lower() in _SAFE_KEYS:
        return False
    return bool(_SECRET_KEY.search(key) or _SECRET_URL_NAMES.search(key))


def _mask_assignment(match: re.Match[str]) -> str:
    name = match.group(1)
    return f"{name}={REDACTED}" if is_secret_key(name) else match.group(0)


# Any fixed substring that one of `redact_text`'s patterns needs: a text without one has
# nothing to mask. One scan of the text where the substring tests were nine (an id, a name:
# most of the strings of every event payload; issue 18, bench cell 3).
_ANY_MARKER = re.compile(
    "|".join(re.escape(m) for m in (*_SECRET_VALUE_MARKERS, "eyJ", "=", "://"))
)


def redact_text(text: str) -> str:
    # Each pattern needs a fixed substring: testing for it first skips the regex scans of
    # an ordinary log line (every event payload is redacted; the credential scan of a
    # 170-character line was ~5 µs, the substring tests are a fraction of that).
    if _ANY_MARKER.search(text) is None:
        return text
    if any(marker in text for marker in _SECRET_VALUE_MARKERS):
        text = _SECRET_VALUE.sub(REDACTED, text)
    if "eyJ" in text:
        text = _JWT.sub(REDACTED, text)
    if "=" in text:
        text = _ENV_ASSIGNMENT.sub(_mask_assignment, text)
    if "://" in text:
        text = _DSN_PASSWORD.sub(rf"\1{REDACTED}@", text)
    return text


def redact_json(value: Any) -> Any:
    """Return a copy of `value` with secret-named keys and credential-like strings masked."""
    if isinstance(value, str):  # first: most values are
        return redact_text(value)
    if isinstance(value, dict):
        return {
            key: REDACTED
            if is_secret_key(str(key)) and item not in (None, "")
            else redact_json(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    return value
