"""API key authentication and the role permissions.

`Authorization: Bearer <key>` is looked up by digest. The authenticated principal is the
`ApiKey` itself (`request.auth`); `request.user` is a small `KeyPrincipal` so DRF's
`is_authenticated` checks work without Django users. Tenant scoping is not done here but
in the tenant gate (`agentrun.tenancy.Scope.of`), so that another tenant's object is a 404.

A run-scoped runner key is handed to code the tenant controls (the agent can read it), so
it lives no longer than its run: `revoke_run_keys_locked` runs in the run's terminal
transaction, and every runner key expires `AGENTRUN_RUNNER_KEY_TTL_S` after it was issued.
A revoked or expired key is a 401.
"""

from __future__ import annotations

import base64
import os
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from agentrun import conf, throttle
from agentrun.hashing import secret_digest
from agentrun.ids import new_id, new_ids
from agentrun.models import ApiKey, ApiKeyRole

KEY_PREFIX = "ar"


@dataclass(frozen=True)
class KeyPrincipal:
    api_key: ApiKey

    is_authenticated = True
    is_anonymous = False

    @property
    def pk(self) -> str:
        return self.api_key.id


@dataclass(frozen=True)
class IssuedKey:
    api_key: ApiKey
    secret: str


@dataclass(frozen=True)
class KeyRequest:
    tenant_id: str
    role: str
    run_id: str | None = None
    name: str = ""


def issue_api_key(
    *, tenant_id: str, role: str, run_id: str | None = None, name: str = ""
) -> IssuedKey:
    """Create a key and return it with its secret, which is never stored or shown again."""
    return issue_api_keys(requests=[KeyRequest(tenant_id, role, run_id, name)])[0]


def issue_api_keys(*, requests: list[KeyRequest]) -> list[IssuedKey]:
    """`issue_api_key` for many keys in one INSERT (the dispatcher issues one runner key per
    launch, a batch at a time). Validates all before writing any."""
    for request in requests:
        if request.role not in ApiKeyRole.values:
            raise ValueError(
                f"unknown role {request.role!r}; expected one of {', '.join(ApiKeyRole.values)}"
            )
        if request.role == ApiKeyRole.RUNNER and not request.run_id:
            raise ValueError("a runner key is scoped to one run: give its run id")
    issued = [_new_key(request) for request in requests]
    ApiKey.objects.bulk_create([key.api_key for key in issued])
    return issued


@dataclass(frozen=True)
class MintedKey:
    """A new key's id, secret and stored digest, before its row exists: for a writer that
    inserts the row in a statement of its own (the dispatch claim issues its batch's runner
    keys in the claim statement, `dispatch.locks`)."""

    id: str
    secret: str
    key_prefix: str
    key_digest: str


def mint_key(role: str) -> MintedKey:
    secret = f"{KEY_PREFIX}_{role}_{secrets.token_urlsafe(32)}"
    return MintedKey(
        id=new_id("key"),
        secret=secret,
        key_prefix=secret[: len(KEY_PREFIX) + len(role) + 8],
        key_digest=secret_digest(secret),
    )


def mint_keys(role: str, count: int) -> list[MintedKey]:
    """`count` keys as `mint_key` makes them (same shapes: `secrets.token_urlsafe(32)` is
    the unpadded urlsafe base64 of 32 random bytes), from one read of the system's random
    source for every secret and one for every id: a dispatch claim mints a batch's keys
    (issue 18, cell 3: ~4 µs a key, half of it the two `getrandom` calls)."""
    pool, prefix_length = os.urandom(32 * count), len(KEY_PREFIX) + len(role) + 8
    keys = []
    for index, key_id in enumerate(new_ids("key", count)):
        token = base64.urlsafe_b64encode(pool[32 * index : 32 * index + 32]).rstrip(b"=")
        secret = f"{KEY_PREFIX}_{role}_{token.decode('ascii')}"
        keys.append(MintedKey(key_id, secret, secret[:prefix_length], secret_digest(secret)))
    return keys


def runner_key_expires_at() -> datetime:
    """When a runner key issued now expires."""
    return timezone.now() + timedelta(seconds=conf.runner_key_ttl_s())


def _new_key(request: KeyRequest) -> IssuedKey:
    role = request.role
    minted = mint_key(role)
    runner = role == ApiKeyRole.RUNNER
    api_key = ApiKey(
        id=minted.id,
        name=request.name,
        tenant_id=request.tenant_id,
        role=role,
        run_id=request.run_id if runner else None,
        key_prefix=minted.key_prefix,
        key_digest=minted.key_digest,
        expires_at=runner_key_expires_at() if runner else None,
    )
    return IssuedKey(api_key=api_key, secret=minted.secret)


def revoke_run_keys_locked(run_id: str) -> int:
    """Revoke the runner keys of a run that has ended; returns how many. Called inside the
    run's terminal transaction (under its run lock), so a key never outlives the commit
    that ended its run."""
    return ApiKey.objects.filter(
        run_id=run_id, role=ApiKeyRole.RUNNER, revoked_at__isnull=True
    ).update(revoked_at=timezone.now())


def _bearer_token(request: Request) -> str:
    header = authentication.get_authorization_header(request).decode("latin-1")
    return header.partition(" ")[2].strip() if header.lower().startswith("bearer ") else ""


def unchecked_runner_key_digest(request: Request) -> str | None:
    """The digest of the request's bearer key when it reads as a runner key (its prefix,
    which proves nothing), for a write that checks the key in its own first statement
    instead of in a lookup before it (`runs.locks.lock_run_for_runner_key`: revoked,
    expired and other runs' keys match no row there). None: authenticate the ordinary
    way. The throttle is asked first, as `ApiKeyAuthentication` does."""
    token = _bearer_token(request)
    if not token.startswith(f"{KEY_PREFIX}_{ApiKeyRole.RUNNER}_"):
        return None
    throttle.refuse_if_throttled(request)
    return secret_digest(token)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[KeyPrincipal, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise exceptions.AuthenticationFailed("expected 'Authorization: Bearer <key>'")
        throttle.refuse_if_throttled(request)
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        api_key = ApiKey.objects.filter(
            live, key_digest=secret_digest(token.strip()), revoked_at__isnull=True
        ).first()
        if api_key is None:
            throttle.record_key_failure(request)
            raise exceptions.AuthenticationFailed("unknown, revoked or expired API key")
        return KeyPrincipal(api_key), api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="agentrun"'


def request_key(request: Request) -> ApiKey:
    """The authenticated key of a request that passed `IsAuthenticatedKey`."""
    api_key = request.auth
    assert isinstance(api_key, ApiKey)
    return api_key


class IsAuthenticatedKey(permissions.BasePermission):
    message = "authentication required: send 'Authorization: Bearer <key>'"

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ApiKey)


class _RolePermission(permissions.BasePermission):
    roles: frozenset[str] = frozenset()

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, ApiKey) and request.auth.role in self.roles


class IsOperator(_RolePermission):
    message = "this endpoint needs an operator key"
    roles = frozenset({ApiKeyRole.OPERATOR})


class IsClientOrOperator(_RolePermission):
    message = "this endpoint needs a client or operator key"
    roles = frozenset({ApiKeyRole.CLIENT, ApiKeyRole.OPERATOR})


class IsRunnerOrOperator(_RolePermission):
    message = "this endpoint is part of the runner protocol: it needs a runner or operator key"
    roles = frozenset({ApiKeyRole.RUNNER, ApiKeyRole.OPERATOR})
