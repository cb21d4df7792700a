"""Signing secrets: `whsec_` + base64 of 32 random bytes (the Standard Webhooks form), and
which secrets sign now (the current one, plus the previous one during its grace period)."""

from __future__ import annotations

import base64
import secrets as random_bytes

from django.utils import timezone

from webhooks.models import WebhookEndpoint

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(random_bytes.token_bytes(32)).decode()


def signing_secrets(endpoint: WebhookEndpoint) -> list[str]:
    """The secrets a delivery is signed with now, current first. Reads no database."""
    grace = endpoint.previous_secret_expires_at
    if endpoint.previous_secret and grace is not None and grace > timezone.now():
        return [endpoint.secret, endpoint.previous_secret]
    return [endpoint.secret]
