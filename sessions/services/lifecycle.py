"""Session upsert, read cursors and storage (seed `upsertSession`, `markSessionRead`,
`refreshSessionStorage`, `markSessionStorageEvicted`, `listGcExpiredSessions`).

Each is one transaction holding the session row lock; visible changes take a new global
version. Storage GC deletes a `local` session directory only under the configured
storage root, then records the eviction.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentrun.errors import invalid, not_found
from sessions.locks import lock_session
from sessions.models import Session, SessionReadCursor, StorageKind
from sessions.versions import next_session_version


@dataclass(frozen=True)
class SessionFields:
    project_id: str
    backend_profile: str
    conversation_id: str | None = None
    thread_id: str | None = None
    metadata: dict[str, Any] | None = None
    expires_at: datetime | None = None
    codex_rollout_subdir: str = "sessions"


def _locked_for(session_id: str, tenant_id: str | None) -> Session:
    session = lock_session(session_id)
    if session is None or (tenant_id is not None and session.tenant_id != tenant_id):
        raise not_found("session", session_id)
    return session


def upsert_session(*, session_id: str, tenant_id: str, fields: SessionFields) -> Session:
    """Create or update a session's own fields. Another tenant's id is a 404. Locks: the
    session row."""
    now = timezone.now()
    values = {**fields.__dict__, "metadata": fields.metadata or {}}
    with transaction.atomic():
        session = lock_session(session_id)
        if session is not None and session.tenant_id != tenant_id:
            raise not_found("session", session_id)
        if session is None:
            return Session.objects.create(
                session_id=session_id,
                tenant_id=tenant_id,
                version=next_session_version(),
                created_at=now,
                updated_at=now,
                **values,
            )
        for name, value in values.items():
            setattr(session, name, value)
        session.version = next_session_version()
        session.updated_at = now
        session.save(update_fields=[*values, "version", "updated_at"])
    return session


def mark_session_read(
    *, session_id: str, tenant_id: str | None, reader_id: str
) -> SessionReadCursor:
    """Remember that `reader_id` has seen the session as it is now."""
    with transaction.atomic():
        session = _locked_for(session_id, tenant_id)
        cursor, _ = SessionReadCursor.objects.update_or_create(
            session=session,
            reader_id=reader_id,
            defaults={"session_version": session.version, "read_at": timezone.now()},
        )
    return cursor


@dataclass(frozen=True)
class StorageFacts:
    storage_kind: str
    storage_path: str | None = None
    storage_pvc_name: str | None = None
    storage_namespace: str | None = None
    storage_pvc_phase: str | None = None
    storage_size_bytes: int | None = None
    storage_files_count: int | None = None
    storage_sha256: str | None = None
    codex_rollout_subdir: str | None = None


def refresh_session_storage(
    *, session_id: str, tenant_id: str | None, facts: StorageFacts
) -> Session:
    """Record where a session's state lives and how big it is."""
    if facts.storage_kind == StorageKind.LOCAL and not facts.storage_path:
        raise invalid("storage_path: required for local storage", field="storage_path")
    if facts.storage_kind == StorageKind.PVC and not facts.storage_pvc_name:
        raise invalid("storage_pvc_name: required for pvc storage", field="storage_pvc_name")
    with transaction.atomic():
        session = _locked_for(session_id, tenant_id)
        values = {k: v for k, v in facts.__dict__.items() if k != "codex_rollout_subdir"}
        for name, value in values.items():
            setattr(session, name, value)
        session.codex_rollout_subdir = facts.codex_rollout_subdir or session.codex_rollout_subdir
        session.storage_updated_at = session.updated_at = timezone.now()
        session.version = next_session_version()
        session.save(
            update_fields=[
                *values,
                "codex_rollout_subdir",
                "storage_updated_at",
                "updated_at",
                "version",
            ]
        )
    return session


def mark_session_storage_evicted(*, session_id: str, tenant_id: str | None) -> Session:
    """Record that the session's storage is gone (its next run starts a fresh thread dir)."""
    with transaction.atomic():
        session = _locked_for(session_id, tenant_id)
        now = timezone.now()
        session.storage_kind = StorageKind.EVICTED
        session.storage_evicted_at = session.storage_updated_at = session.updated_at = now
        session.version = next_session_version()
        session.save(
            update_fields=[
                "storage_kind",
                "storage_evicted_at",
                "storage_updated_at",
                "updated_at",
                "version",
            ]
        )
    return session


def expired_storage_sessions(*, now: datetime, limit: int) -> list[Session]:
    """Sessions past `expires_at` that still hold storage, oldest first."""
    return list(
        Session.objects.filter(
            storage_kind__in=[StorageKind.LOCAL, StorageKind.PVC], expires_at__lte=now
        ).order_by("updated_at")[:limit]
    )


def gc_expired_local_storage(*, limit: int = 100, dry_run: bool = False) -> dict[str, int]:
    """Delete expired `local` session directories under the storage root and mark them
    evicted. PVC storage is the Kubernetes launcher's to delete; it is only counted."""
    root = Path(settings.AGENTRUN_SESSION_STORAGE_ROOT).resolve()
    counts = {"evicted": 0, "skipped_outside_root": 0, "pvc_pending": 0}
    for session in expired_storage_sessions(now=timezone.now(), limit=limit):
        if session.storage_kind == StorageKind.PVC:
            counts["pvc_pending"] += 1
            continue
        path = Path(session.storage_path or "").resolve()
        if root not in path.parents:
            counts["skipped_outside_root"] += 1
            continue
        if not dry_run:
            shutil.rmtree(path, ignore_errors=True)
            mark_session_storage_evicted(session_id=session.session_id, tenant_id=None)
        counts["evicted"] += 1
    return counts
