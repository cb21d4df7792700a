"""Sessions: conversations with an agent that span several runs, one turn at a time.

`agentrun_sessions` keeps the seed's columns (migrations 003, 006, 007). The session row
is a projection of its runs, written by the runs and sessions services in the same
transactions as the runs. `version` comes from one global sequence and is bumped on every
visible change, so `version > cursor` is a change feed (see `sessions.versions`).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

from agentrun.db_schema import EMPTY_OBJECT
from agentrun.model_bases import ReadMark, partial_index

TITLE_MAX = 120


def title_from_text(text: Any) -> str | None:
    """A session (or queued turn) title from a turn's text: its first words on one line,
    cut to `TITLE_MAX`; None for no text."""
    if not isinstance(text, str) or not text.strip():
        return None
    line = " ".join(text.split())
    return line if len(line) <= TITLE_MAX else line[: TITLE_MAX - 1] + "…"


class ExecutionState(models.TextChoices):
    IDLE = "idle"
    RUNNING = "running"
    TERMINAL = "terminal"


class StorageKind(models.TextChoices):
    NONE = "none"
    LOCAL = "local"
    PVC = "pvc"
    EVICTED = "evicted"


class Session(models.Model):
    session_id = models.TextField(primary_key=True)
    tenant_id = models.TextField()
    project_id = models.TextField()
    backend_profile = models.TextField()
    conversation_id = models.TextField(null=True, blank=True)
    thread_id = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict, db_default=EMPTY_OBJECT)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    version = models.BigIntegerField(default=1, db_default=1)
    execution_state = models.TextField(
        choices=ExecutionState.choices,
        default=ExecutionState.IDLE,
        db_default=ExecutionState.IDLE.value,
    )
    last_run_id = models.TextField(null=True, blank=True)
    last_command_id = models.TextField(null=True, blank=True)
    active_run_id = models.TextField(null=True, blank=True)
    active_command_id = models.TextField(null=True, blank=True)
    last_event_seq = models.IntegerField(default=0, db_default=0)
    terminal_status = models.TextField(null=True, blank=True)
    failure_kind = models.TextField(null=True, blank=True)
    title = models.TextField(null=True, blank=True)
    summary = models.JSONField(default=dict, db_default=EMPTY_OBJECT)
    last_activity_at = models.DateTimeField(null=True, blank=True)
    storage_kind = models.TextField(
        choices=StorageKind.choices, default=StorageKind.NONE, db_default=StorageKind.NONE.value
    )
    storage_pvc_name = models.TextField(null=True, blank=True)
    storage_namespace = models.TextField(null=True, blank=True)
    # Beyond the seed: the directory of `local` storage, which gc_sessions deletes.
    storage_path = models.TextField(null=True, blank=True)
    storage_size_bytes = models.BigIntegerField(null=True, blank=True)
    storage_files_count = models.IntegerField(null=True, blank=True)
    storage_sha256 = models.TextField(null=True, blank=True)
    storage_updated_at = models.DateTimeField(null=True, blank=True)
    codex_rollout_subdir = models.TextField(default="sessions", db_default="sessions")
    storage_pvc_phase = models.TextField(null=True, blank=True)
    storage_evicted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_sessions"
        indexes = [
            models.Index(
                fields=["execution_state", "backend_profile", "-updated_at"],
                name="agentrun_sessions_control_idx",
            ),
            # The change feed's `version > cursor`, newest change first (the seed's).
            models.Index(fields=["version", "-updated_at"], name="agentrun_sessions_version_idx"),
            models.Index(
                fields=["tenant_id", "project_id", "backend_profile", "updated_at"],
                name="agentrun_sessions_tenant_idx",
            ),
            models.Index(fields=["storage_kind", "expires_at"], name="agentrun_sess_storage_idx"),
            # Storage GC's lookup of a PVC's session (seed `agentrun_sessions_storage_pvc_idx`,
            # shortened to Django's 30 characters); most sessions have no PVC.
            partial_index(
                "storage_pvc_name",
                where=models.Q(storage_pvc_name__isnull=False),
                name="agentrun_sess_storage_pvc_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.session_id

    @property
    def has_active_turn(self) -> bool:
        return self.active_run_id is not None or self.active_command_id is not None


class SessionReadCursor(ReadMark):
    """How far a reader has read a session: the session version at their last mark."""

    pk = models.CompositePrimaryKey("session_id", "reader_id")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="read_cursors")
    session_version = models.BigIntegerField()

    class Meta:
        db_table = "agentrun_session_read_cursors"

    def __str__(self) -> str:
        return f"{self.session_id}/{self.reader_id}@{self.session_version}"
