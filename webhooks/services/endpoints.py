"""Endpoint services: register, change, rotate the secret of, delete; replay; retry now.

Every service takes the caller's `scope` (the tenant gate): another tenant's endpoint is a
404. The URL is checked (scheme, and every address its host resolves to) at registration
and when it changes; the relay checks it again at every send.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentrun import conf
from agentrun.errors import invalid
from agentrun.ids import new_id
from agentrun.tenancy import Scope
from webhooks.locks import lock_endpoint
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.record import wake_webhook_relay
from webhooks.services.secrets import new_secret
from webhooks.sql import insert_replay
from webhooks.targets import TargetRefused, resolve_target

MAX_REPLAY = 10_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_target(url: str) -> None:
    """400 `url` unless the URL is an allowed target now (no transaction is open)."""
    try:
        resolve_target(url)
    except TargetRefused as refused:
        raise invalid(f"url: {refused}", field="url") from refused


@dataclass(frozen=True)
class Registered:
    endpoint: WebhookEndpoint
    secret: str  # shown once


def create_endpoint(
    *, tenant_id: str, url: str, event_types: list[str], description: str
) -> Registered:
    """Register an endpoint with a new signing secret. Errors: 400 for a refused URL.
    Resolves the host before the transaction opens."""
    check_target(url)
    secret = new_secret()
    now = timezone.now()
    with transaction.atomic(durable=True):
        endpoint = WebhookEndpoint.objects.create(
            id=new_id("whep"),
            tenant_id=tenant_id,
            url=url,
            event_types=event_types,
            description=description,
            secret=secret,
            created_at=now,
            updated_at=now,
        )
    return Registered(endpoint, secret)


def update_endpoint(*, scope: Scope, endpoint_id: str, changes: dict[str, Any]) -> WebhookEndpoint:
    """Change `url`, `event_types`, `description` or `enabled`. Enabling clears the failure
    record. Locks: the endpoint row. Errors: 404 out of scope, 400 refused URL."""
    if "url" in changes:
        check_target(changes["url"])
    with transaction.atomic(durable=True):
        endpoint = scope.require(lock_endpoint(endpoint_id), kind="webhook", object_id=endpoint_id)
        for name, value in changes.items():
            setattr(endpoint, name, value)
        if changes.get("enabled") is True:
            endpoint.failing_since, endpoint.disabled_reason = None, ""
        endpoint.updated_at = timezone.now()
        endpoint.save(update_fields=[*changes, "failing_since", "disabled_reason", "updated_at"])
    if changes.get("enabled") is True:
        transaction.on_commit(wake_webhook_relay)
    return endpoint


def rotate_secret(*, scope: Scope, endpoint_id: str) -> Registered:
    """A new secret; the old one still signs (second signature) for the grace period."""
    with transaction.atomic(durable=True):
        endpoint = scope.require(lock_endpoint(endpoint_id), kind="webhook", object_id=endpoint_id)
        secret = new_secret()
        now = timezone.now()
        endpoint.previous_secret, endpoint.secret = endpoint.secret, secret
        endpoint.previous_secret_expires_at = now + timedelta(seconds=conf.webhook_secret_grace_s())
        endpoint.updated_at = now
        endpoint.save(
            update_fields=["previous_secret", "secret", "previous_secret_expires_at", "updated_at"]
        )
    return Registered(endpoint, secret)


def delete_endpoint(*, scope: Scope, endpoint_id: str) -> None:
    """Delete the endpoint and its deliveries. Locks: the endpoint row."""
    with transaction.atomic(durable=True):
        endpoint = scope.require(lock_endpoint(endpoint_id), kind="webhook", object_id=endpoint_id)
        endpoint.delete()


def replay_deliveries(
    *, scope: Scope, endpoint_id: str, after_seq: int | None, after_time: datetime | None
) -> list[int]:
    """Send again, in order, what the endpoint matched after the cursor (a delivery `seq`,
    or a time), at most `MAX_REPLAY` deliveries: new deliveries of the same events, with
    the same `webhook-id`. Returns the replayed originals' seqs. Locks: the endpoint row."""
    with transaction.atomic(durable=True):
        scope.require(lock_endpoint(endpoint_id), kind="webhook", object_id=endpoint_id)
        replayed = insert_replay(
            endpoint_id=endpoint_id,
            after_seq=after_seq or 0,
            after_time=after_time or EPOCH,
            limit=MAX_REPLAY,
        )
        if replayed:
            transaction.on_commit(wake_webhook_relay)
    return replayed


def retry_delivery_now(*, seq: int) -> bool:
    """Make an undelivered, unleased delivery due now (the admin's "retry now"). A later
    delivery of its key still waits for the earlier ones. Returns whether it changed."""
    with transaction.atomic(durable=True):
        now = timezone.now()
        changed = (
            WebhookDelivery.objects.filter(pk=seq, delivered_at__isnull=True)
            .exclude(lease_expires_at__gt=now)
            .update(next_attempt_at=now)
        )
        if changed:
            transaction.on_commit(wake_webhook_relay)
    return bool(changed)
