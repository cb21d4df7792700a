"""The work queue: tasks, their attempts, and readers' cursors (seed migrations 004, 010, 014).

Table, column and constraint names are the seed's (`agentrun_queue_tasks`,
`agentrun_queue_attempts`, `agentrun_queue_read_cursors`) so an existing database can be
adopted. A task is the backlog item a client filed; each time agentrun turns it into a
run that is an *attempt* (`retry_index` 0, 1, …). The task row carries a projection of
its latest attempt (`latest_attempt`) and a `version` from one global sequence
(`agentrun_queue_version_seq`), bumped on every visible change, so `version > cursor`
is a change feed (see `queues.versions`). Every write goes through `queues.services`.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.fields.json import KT
from django.utils import timezone

from agentrun.db_schema import EMPTY_ARRAY, EMPTY_OBJECT
from agentrun.model_bases import (
    ReadMark,
    SessionReferenced,
    TextIdModel,
    Timestamped,
    partial_index,
    unique_idempotency_key,
)


class TaskState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class AttemptState(models.TextChoices):
    """A task's states, spelled from TaskState so the two cannot drift apart, and before
    them `reserved`: a retry waiting to be activated."""

    RESERVED = "reserved"
    PENDING = TaskState.PENDING.value
    RUNNING = TaskState.RUNNING.value
    COMPLETED = TaskState.COMPLETED.value
    FAILED = TaskState.FAILED.value
    BLOCKED = TaskState.BLOCKED.value
    CANCELLED = TaskState.CANCELLED.value


# Tasks and attempts share their terminal values, so one set serves both.
TERMINAL_STATES = frozenset(
    {TaskState.COMPLETED, TaskState.FAILED, TaskState.BLOCKED, TaskState.CANCELLED}
)
RETRYABLE_TASK_STATES = frozenset({TaskState.FAILED, TaskState.BLOCKED})
# The seed's "one active attempt per task" fence: reserved (a retry waiting to be
# activated) or running. A terminal attempt is immutable.
ACTIVE_ATTEMPT_STATES = (AttemptState.RESERVED, AttemptState.RUNNING)


def state_check(states: type[models.TextChoices], name: str) -> models.CheckConstraint:
    """The seed's CHECK that a row's `state` is one of its enum's values."""
    return models.CheckConstraint(condition=models.Q(state__in=states.values), name=name)


class QueueTask(SessionReferenced, TextIdModel):
    tenant_id = models.TextField()
    project_id = models.TextField()
    queue = models.TextField()
    lane = models.TextField()
    title = models.TextField()
    priority = models.IntegerField()
    state = models.TextField(choices=TaskState.choices, default=TaskState.PENDING)
    version = models.BigIntegerField()
    backend_profile = models.TextField()
    provider_id = models.TextField(null=True, blank=True)
    workspace_ref = models.JSONField(null=True, blank=True)
    session_ref = models.JSONField(null=True, blank=True)  # seed migration 010
    execution_policy = models.JSONField(null=True, blank=True)
    resource_bundle_ref = models.JSONField(null=True, blank=True)
    payload = models.JSONField()
    payload_hash = models.TextField()
    references = models.JSONField(db_column="references_json", default=list, db_default=EMPTY_ARRAY)
    metadata = models.JSONField(default=dict, db_default=EMPTY_OBJECT)
    idempotency_key = models.TextField(null=True, blank=True)
    latest_attempt = models.JSONField(null=True, blank=True)
    session_path = models.TextField(null=True, blank=True)
    # Beyond the seed: the runner dispatch request of the task's turns (`{}` = the default
    # launcher; SQL NULL = no dispatch), as SPEC §2 lets queue tasks say `"dispatch": null`.
    dispatch = models.JSONField(null=True, blank=True, default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_queue_tasks"
        constraints = [
            unique_idempotency_key(
                "tenant_id", "project_id", name="agentrun_queue_tasks_idempotency_idx"
            ),
            state_check(TaskState, "agentrun_queue_tasks_state_check"),
        ]
        indexes = [
            # The seed's list and change-feed indexes (names shortened to Django's 30).
            models.Index(
                fields=["queue", "state", "version", "priority", "created_at"],
                name="agentrun_qtasks_list_idx",
            ),
            models.Index(fields=["version", "updated_at"], name="agentrun_qtasks_updated_idx"),
            # The scheduler's claim order over pending tasks only.
            partial_index(
                "-priority",
                "created_at",
                "id",
                where=models.Q(state=TaskState.PENDING),
                name="agentrun_qtasks_pending_idx",
            ),
            # Per-queue running counts (the concurrency limit).
            partial_index(
                "queue",
                where=models.Q(state=TaskState.RUNNING),
                name="agentrun_qtasks_running_idx",
            ),
            # A session's queued and running turns, in order.
            models.Index(
                KT("session_ref__session_id"),
                "created_at",
                condition=models.Q(state__in=[TaskState.PENDING, TaskState.RUNNING]),
                name="agentrun_qtasks_session_idx",
            ),
            models.Index(
                fields=["tenant_id", "-priority", "created_at"], name="agentrun_qtasks_tenant_idx"
            ),
        ]

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


# What an attempt led to: the run, command, runner job and session it made, and its failure.
ATTEMPT_OUTCOME_FIELDS = (
    "run_id",
    "command_id",
    "runner_job_id",
    "session_id",
    "session_path",
    "failure_kind",
    "failure_message",
)
# What a task row's `latest_attempt` projection carries of its latest attempt, in order.
LATEST_ATTEMPT_FIELDS = ("attempt_id", "retry_index", "state", *ATTEMPT_OUTCOME_FIELDS)


class QueueAttempt(Timestamped):
    """One try at a task. Not registered in admin: Django admin does not support composite
    primary keys; the task's admin page shows its attempts instead."""

    pk = models.CompositePrimaryKey("task_id", "attempt_id")
    attempt_id = models.TextField()
    task = models.ForeignKey(
        QueueTask, on_delete=models.CASCADE, related_name="attempts", db_index=False
    )
    retry_index = models.IntegerField()
    state = models.TextField(choices=AttemptState.choices)
    idempotency_key = models.TextField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    payload_hash = models.TextField()
    previous_attempt_id = models.TextField(null=True, blank=True)
    # Plain text, not foreign keys (as in the seed): a reserved attempt names the run id it
    # will create when it is activated.
    run_id = models.TextField(null=True, blank=True)
    command_id = models.TextField(null=True, blank=True)
    runner_job_id = models.TextField(null=True, blank=True)
    session_id = models.TextField(null=True, blank=True)
    session_path = models.TextField(null=True, blank=True)
    failure_kind = models.TextField(null=True, blank=True)
    failure_message = models.TextField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    terminal_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_queue_attempts"
        constraints = [
            models.UniqueConstraint(
                fields=["task", "retry_index"],
                name="agentrun_queue_attempts_task_id_retry_index_key",
            ),
            unique_idempotency_key("task", name="agentrun_queue_attempts_retry_key_idx"),
            models.UniqueConstraint(
                fields=["task"],
                condition=models.Q(state__in=ACTIVE_ATTEMPT_STATES),
                name="agentrun_queue_attempts_active_idx",
            ),
            models.CheckConstraint(
                condition=models.Q(retry_index__gte=0),
                name="agentrun_queue_attempts_retry_index_check",
            ),
            state_check(AttemptState, "agentrun_queue_attempts_state_check"),
        ]
        indexes = [
            models.Index(
                fields=["task", "-retry_index", "-created_at"],
                name="agentrun_qattempts_history_idx",
            ),
            # The projector's lookup of a session run's attempt (see projection.task_id_of).
            partial_index(
                "run_id",
                where=models.Q(run_id__isnull=False),
                name="agentrun_qattempts_run_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id}/{self.attempt_id}#{self.retry_index} {self.state}"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def as_ref(self) -> dict[str, Any]:
        """The `latest_attempt` projection the task row carries."""
        return {name: getattr(self, name) for name in LATEST_ATTEMPT_FIELDS}


class QueueReadCursor(ReadMark):
    """How far a reader has read a task: its version at their last mark. Not registered in
    admin (composite primary key)."""

    pk = models.CompositePrimaryKey("task_id", "reader_id")
    task = models.ForeignKey(
        QueueTask, on_delete=models.CASCADE, related_name="read_cursors", db_index=False
    )
    task_version = models.BigIntegerField()

    class Meta:
        db_table = "agentrun_queue_read_cursors"
        indexes = [models.Index(fields=["reader_id"], name="agentrun_qcursors_reader_idx")]

    def __str__(self) -> str:
        return f"{self.task_id}/{self.reader_id}@{self.task_version}"
