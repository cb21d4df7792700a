"""Control over runs: cancel requests, approvals (SPEC §9.3) and tenant quotas (§9.4).

Kept beside `runs/models.py` (which is at its size limit) and imported at its end, so
Django registers these models as the `runs` app's. An approval belongs to a run and the
command whose turn asked; `request_key` names what the backend asked for, so a runner that
asks the same thing again (after a restart) gets the same record, never a second one.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from agentrun.db_schema import EMPTY_OBJECT
from agentrun.model_bases import TextIdModel, Timestamped, partial_index
from runs.models import Command, Run


class CancelStage(models.TextChoices):
    ACCEPTED = "accepted"
    PERSISTED = "persisted"
    FENCED = "fenced"
    DELIVERED = "delivered"
    ABORTING = "aborting"
    TERMINALIZED = "terminalized"


class CancelTargetKind(models.TextChoices):
    RUN = "run"
    COMMAND = "command"
    SESSION = "session"
    TASK = "task"


class CancelRequest(TextIdModel, Timestamped):
    target_kind = models.TextField(choices=CancelTargetKind.choices)
    target_id = models.TextField()
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, null=True, blank=True, related_name="cancel_requests"
    )
    command = models.ForeignKey(
        Command, on_delete=models.SET_NULL, null=True, blank=True, related_name="cancel_requests"
    )
    session_id = models.TextField(null=True, blank=True)
    task_id = models.TextField(null=True, blank=True)
    reason = models.TextField()
    requested_by = models.TextField(null=True, blank=True)
    epoch = models.IntegerField()
    stage = models.TextField(choices=CancelStage.choices)
    metadata = models.JSONField(default=dict, db_default=EMPTY_OBJECT)

    class Meta:
        db_table = "agentrun_cancel_requests"
        indexes = [
            models.Index(
                fields=["target_kind", "target_id", "-created_at"],
                name="agentrun_cancel_target_idx",
            ),
            models.Index(fields=["run", "-created_at"], name="agentrun_cancel_run_idx"),
            models.Index(fields=["command", "-created_at"], name="agentrun_cancel_command_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.target_kind} {self.target_id}: {self.stage})"


class ApprovalKind(models.TextChoices):
    COMMAND = "command"
    FILE_CHANGE = "file_change"
    OTHER = "other"


class ApprovalState(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


# A person's decision → the state it records.
DECISION_STATES = {"approve": ApprovalState.APPROVED, "deny": ApprovalState.DENIED}


class Approval(TextIdModel, Timestamped):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    command = models.ForeignKey(Command, on_delete=models.CASCADE, related_name="approvals")
    # Copied from the run: the tenant gate and the session's `needs_action` read them
    # without a join.
    tenant_id = models.TextField()
    session_id = models.TextField(null=True, blank=True)
    request_key = models.TextField()
    kind = models.TextField(choices=ApprovalKind.choices)
    summary = models.TextField()
    details = models.JSONField(default=dict)
    state = models.TextField(choices=ApprovalState.choices, default=ApprovalState.PENDING)
    decided_by = models.TextField(null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_approvals"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "request_key"], name="agentrun_approvals_request_key"
            ),
        ]
        indexes = [
            models.Index(fields=["run", "created_at"], name="agentrun_approvals_run_idx"),
            # The expiry sweep and the sessions' `needs_action` read pending ones only.
            partial_index(
                "expires_at",
                where=models.Q(state="pending"),
                name="agentrun_approvals_due_idx",
            ),
            partial_index(
                "session_id",
                where=models.Q(state="pending"),
                name="agentrun_approvals_session_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.kind}: {self.state})"

    @property
    def is_pending(self) -> bool:
        return self.state == ApprovalState.PENDING

    @property
    def decision(self) -> str:
        """What the backend is told: `approve` only for an approval, else `deny`."""
        return "approve" if self.state == ApprovalState.APPROVED else "deny"


class TenantQuota(models.Model):
    """An operator's ceiling on a tenant's token use over any rolling 24 hours."""

    tenant_id = models.TextField(primary_key=True)
    max_tokens_per_day = models.BigIntegerField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agentrun_tenant_quotas"

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.max_tokens_per_day} tokens/day"
