"""Session upsert, read cursors and storage (seed `upsertSession`, `markSessionRead`,
`refreshSessionStorage`, `markSessionStorageEvicted`, `listGcExpiredSessions`).

Each is one transaction holding the session row lock; visible changes take a new global
version. A `local` session's storage lives in its own directory,
`<AGENTRUN_SESSION_STORAGE_ROOT>/<tenant_id>/<session_id>` (issue 16): a client may name
a path inside it and nothing else, and storage GC deletes only that directory (derived
from the ids, never from the path the client sent), then records the eviction.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentrun import conf
from agentrun.errors import invalid
from agentrun.tenancy import Scope
from sessions.locks import lock_or_insert_session, lock_session
from sessions.models import Session, SessionReadCursor, StorageKind
from sessions.versions import next_session_version


@dataclass(frozen=True)
class SessionFields:
    project_id: str
    backend_profile: str
    conversation_id: str | None = None
    # No thread_id: the server records it from the backend's reports (issue 16 finding 4).
    metadata: dict[str, Any] | None = None
    expires_at: datetime | None = None
    codex_rollout_subdir: str = "sessions"


def _locked_for(session_id: str, scope: Scope) -> Session:
    return scope.require(lock_session(session_id), kind="session", object_id=session_id)


def upsert_session(*, session_id: str, tenant_id: str, fields: SessionFields) -> Session:
    """Create or update a session's own fields. Another tenant's id is a 404. Locks: the
    session row."""
    now = timezone.now()
    values = {**fields.__dict__, "metadata": fields.metadata or {}}
    with transaction.atomic(durable=True):
        session = lock_session(session_id)
        if session is None:
            new = Session(
                session_id=session_id,
                tenant_id=tenant_id,
                version=next_session_version(),
                created_at=now,
                updated_at=now,
                **values,
            )
            session, inserted = lock_or_insert_session(new)
            if inserted:
                return session
        Scope.tenant(tenant_id).require(session, kind="session", object_id=session_id)
        for name, value in values.items():
            setattr(session, name, value)
        session.version = next_session_version()
        session.updated_at = now
        session.save(update_fields=[*values, "version", "updated_at"])
    return session


def mark_session_read(*, session_id: str, scope: Scope, reader_id: str) -> SessionReadCursor:
    """Remember that `reader_id` has seen the session as it is now."""
    with transaction.atomic(durable=True):
        session = _locked_for(session_id, scope)
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


def refresh_session_storage(*, session_id: str, scope: Scope, facts: StorageFacts) -> Session:
    """Record where a session's state lives and how big it is.

    Errors: 400 a `local` path outside the session's own directory (after resolving `..`
    and symlinks), 400 a rollout subdir that is not a plain relative path."""
    if facts.storage_kind == StorageKind.LOCAL and not facts.storage_path:
        raise invalid("storage_path: required for local storage", field="storage_path")
    if facts.storage_kind == StorageKind.PVC and not facts.storage_pvc_name:
        raise invalid("storage_pvc_name: required for pvc storage", field="storage_pvc_name")
    if facts.codex_rollout_subdir is not None:
        _check_relative(facts.codex_rollout_subdir, field="codex_rollout_subdir")
    with transaction.atomic(durable=True):
        session = _locked_for(session_id, scope)
        if facts.storage_kind == StorageKind.LOCAL:
            _check_confined(session, facts.storage_path or "")
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


def mark_session_storage_evicted(*, session_id: str, scope: Scope) -> Session:
    """Record that the session's storage is gone (its next run starts a fresh thread dir)."""
    with transaction.atomic(durable=True):
        session = _locked_for(session_id, scope)
        _evict_locked(session)
    return session


def _evict_locked(session: Session) -> None:
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


def gc_expired_local_storage(*, limit: int = 100, dry_run: bool = False) -> dict[str, int]:
    """Evict up to `limit` expired `local` sessions: mark each evicted, then delete its
    directory. PVC storage is the Kubernetes launcher's to delete; it is only counted.

    A path outside the storage root is never deleted, only counted. Such sessions and PVCs
    are never changed here, so they stay the oldest: `limit` counts evictions, not sessions
    looked at, or they would starve the local directories behind them. Each eviction is
    decided in its own transaction under the session lock (still local, same path, still
    expired) and the directory deleted after the commit: a session refreshed meanwhile
    keeps its storage, and a crash in between leaves a directory behind (its path stays on
    the evicted row), never a live session without its directory.
    """
    now = timezone.now()
    pvc_pending = Session.objects.filter(storage_kind=StorageKind.PVC, expires_at__lte=now)
    counts = {"evicted": 0, "skipped_outside_root": 0, "pvc_pending": pvc_pending.count()}
    for session_id, tenant_id, storage_path in _expired_local_candidates(now):
        if counts["evicted"] >= limit:
            break
        path = _own_directory_holding(tenant_id, session_id, storage_path)
        if path is None:
            counts["skipped_outside_root"] += 1
            continue
        if dry_run:
            counts["evicted"] += 1
        elif _evict_if_still_expired(session_id, storage_path, now=now):
            shutil.rmtree(path, ignore_errors=True)
            counts["evicted"] += 1
    return counts


def _expired_local_candidates(now: datetime) -> list[tuple[str, str, str | None]]:
    expired = Session.objects.filter(storage_kind=StorageKind.LOCAL, expires_at__lte=now)
    ordered = expired.order_by("updated_at", "session_id")
    return list(ordered.values_list("pk", "tenant_id", "storage_path"))


def session_storage_dir(tenant_id: str, session_id: str) -> Path | None:
    """The one directory a session's local storage may use, or None when an id is not a
    single path segment or the directory is a symlink (either could point elsewhere)."""
    if not (_is_segment(tenant_id) and _is_segment(session_id)):
        return None
    directory = conf.session_storage_root().resolve() / tenant_id / session_id
    return directory if directory.resolve() == directory else None


def _is_segment(name: str) -> bool:
    return bool(name) and name not in {".", ".."} and not any(c in name for c in "/\\\0")


def _confined(directory: Path, storage_path: str) -> bool:
    """`storage_path` is absolute, has no `..`, and resolves (symlinks followed) to
    `directory` or below it."""
    path = Path(storage_path)
    if "\0" in storage_path or not path.is_absolute() or ".." in path.parts:
        return False
    resolved = path.resolve()
    return resolved == directory or directory in resolved.parents


def _check_confined(session: Session, storage_path: str) -> None:
    directory = session_storage_dir(session.tenant_id, session.session_id)
    if directory is None or not _confined(directory, storage_path):
        raise invalid(
            "storage_path: must be an absolute path without '..' inside the session's "
            "storage directory (<storage root>/<tenant id>/<session id>)",
            field="storage_path",
        )


def _check_relative(subdir: str, *, field: str) -> None:
    path = Path(subdir)
    if not subdir or "\0" in subdir or path.is_absolute() or ".." in path.parts:
        raise invalid(f"{field}: must be a relative path without '..'", field=field)


def _own_directory_holding(
    tenant_id: str, session_id: str, storage_path: str | None
) -> Path | None:
    """The session's own directory if its recorded path still lies inside it (checked again:
    a symlink may have appeared since), else None: GC never deletes anything else."""
    directory = session_storage_dir(tenant_id, session_id)
    if directory is None or not storage_path or not _confined(directory, storage_path):
        return None
    return directory


def _evict_if_still_expired(session_id: str, storage_path: str | None, *, now: datetime) -> bool:
    with transaction.atomic(durable=True):
        session = lock_session(session_id)
        still_expired = (
            session is not None
            and session.storage_kind == StorageKind.LOCAL
            and session.storage_path == storage_path
            and session.expires_at is not None
            and session.expires_at <= now
        )
        if session is None or not still_expired:
            return False
        _evict_locked(session)
    return True
