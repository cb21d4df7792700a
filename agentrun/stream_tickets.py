"""Stream tickets: how a browser opens a stream without putting an API key in a URL.

`EventSource` cannot send an `Authorization` header, so a page asks its own backend (which
holds the key) for a ticket, `POST /api/v1/stream-tickets {"run_id" | "session_id"}`, and
opens `…/stream?ticket=…`. A ticket is signed with the project's `SECRET_KEY` (Django's
signing: any server of the deployment checks it, a restart keeps it valid), names the key
that asked, its tenant and one resource, and expires after `AGENTRUN_STREAM_TICKET_TTL_S`.

Only the stream routes accept one (`TicketAuthentication` is in their authentication
classes, nowhere else); the request then acts as the key, which must still be live. A
forged, expired or revoked-key ticket is a 401 envelope; a ticket used on another resource
is that resource's 404, like any object outside a key's scope. A ticket is not
single-use: a browser's automatic reconnect sends the same URL again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core import signing
from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from agentrun import conf
from agentrun.auth import KeyPrincipal
from agentrun.errors import not_found
from agentrun.models import ApiKey

SALT = "agentrun.stream-ticket"
RESOURCE_KINDS = ("run", "session")


@dataclass(frozen=True)
class Ticket:
    key_id: str
    tenant_id: str
    kind: str  # "run" | "session"
    resource_id: str
    expires_at: datetime


def issue_ticket(*, api_key: ApiKey, kind: str, resource_id: str) -> tuple[str, Ticket]:
    """A signed ticket for one resource; the caller checked the key may read it."""
    assert kind in RESOURCE_KINDS, kind
    expires = int(time.time()) + conf.stream_ticket_ttl_s()
    claims = {"k": api_key.id, "t": api_key.tenant_id, "r": kind, "i": resource_id, "e": expires}
    ticket = Ticket(
        api_key.id, api_key.tenant_id, kind, resource_id, datetime.fromtimestamp(expires, UTC)
    )
    return signing.dumps(claims, salt=SALT, compress=True), ticket


def _verified(token: str) -> Ticket:
    try:
        claims: Any = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        raise exceptions.AuthenticationFailed("invalid stream ticket") from None
    try:
        ticket = Ticket(
            str(claims["k"]),
            str(claims["t"]),
            str(claims["r"]),
            str(claims["i"]),
            datetime.fromtimestamp(int(claims["e"]), UTC),
        )
    except (KeyError, TypeError, ValueError):
        raise exceptions.AuthenticationFailed("invalid stream ticket") from None
    if ticket.expires_at <= timezone.now():
        raise exceptions.AuthenticationFailed("stream ticket expired: ask for a new one")
    return ticket


class TicketAuthentication(authentication.BaseAuthentication):
    """`?ticket=` on a stream route (after `Authorization`, which wins when both come)."""

    def authenticate(self, request: Request) -> tuple[KeyPrincipal, ApiKey] | None:
        token = request.query_params.get("ticket")
        if not token:
            return None
        ticket = _verified(token)
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        api_key = ApiKey.objects.filter(
            live, pk=ticket.key_id, tenant_id=ticket.tenant_id, revoked_at__isnull=True
        ).first()
        if api_key is None:
            raise exceptions.AuthenticationFailed("the key of this stream ticket is not valid")
        request.stream_ticket = ticket  # type: ignore[attr-defined]
        return KeyPrincipal(api_key), api_key


def require_ticket_resource(request: Request, *, kind: str, resource_id: str) -> None:
    """A 404 when the request came with a ticket for another resource than the path's."""
    ticket: Ticket | None = getattr(request, "stream_ticket", None)
    if ticket is None:
        return
    if ticket.kind != kind or ticket.resource_id != resource_id:
        raise not_found(kind, resource_id)
