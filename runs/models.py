"""Runs, commands, events, runners, backends, leases, runner jobs and cancel requests.

Table and column names are the seed's (`agentrun_runs`, …) so that an existing agentrun
database can later be adopted. State lives in these rows; every write goes through
`runs.services`, which owns the transitions, so the admin shows most fields read-only.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F, TextField, Value
from django.db.models.fields.json import KT, KeyTransform
from django.db.models.functions import Concat, Lower
from django.utils import timezone

from agentrun.db_schema import EMPTY_OBJECT
from agentrun.model_bases import (
    CancelMarked,
    SessionReferenced,
    TextIdModel,
    Timestamped,
    partial_index,
    unique_idempotency_key,
)


class RunStatus(models.TextChoices):
    PENDING = "pending"
    CLAIMED = "claimed"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


# The run status sets, spelled once. Tuples where an index condition uses them: a
# migration serializes the condition, and a tuple keeps its order stable.
TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.BLOCKED, RunStatus.CANCELLED}
)
LIVE_RUN_STATUSES = (RunStatus.PENDING, RunStatus.CLAIMED, RunStatus.RUNNING)
# Held by a runner under a lease: the reaper, the doctor and the dispatcher's capacity
# count read only these.
LEASED_RUN_STATUSES = (RunStatus.CLAIMED, RunStatus.RUNNING)


class FailureKind(models.TextChoices):
    SCHEMA_INVALID = "schema-invalid"
    INFRA_FAILED = "infra-failed"
    BACKEND_FAILED = "backend-failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    RUNNER_LEASE_CONFLICT = "runner-lease-conflict"
    BUDGET_EXCEEDED = "budget-exceeded"  # the run's token budget ran out (SPEC §9.4)


class CommandType(models.TextChoices):
    """What a command asks of the run's runner: a new turn, guidance for the turn it is
    executing, or to stop that turn."""

    TURN = "turn"
    STEER = "steer"
    INTERRUPT = "interrupt"


class CommandState(models.TextChoices):
    """`pending` until the runner acknowledges it (idempotently), then one of the three
    final states (`TERMINAL_COMMAND_STATES`)."""

    PENDING = "pending"
    ACKNOWLEDGED = "acknowledged"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_COMMAND_STATES = frozenset(
    {CommandState.COMPLETED, CommandState.FAILED, CommandState.CANCELLED}
)


class EventType(models.TextChoices):
    USER_MESSAGE = "user_message"
    BACKEND_STATUS = "backend_status"
    TERMINAL_STATUS = "terminal_status"
    AGENT_MESSAGE = "agent_message"
    AGENT_MESSAGE_DELTA = "agent_message_delta"
    REASONING = "reasoning"
    TOOL_CALL = "tool_call"
    TOOL_OUTPUT = "tool_output"
    FILE_CHANGE = "file_change"
    TOKEN_USAGE = "token_usage"
    LOG = "log"
    ERROR = "error"
    APPROVAL_REQUESTED = "approval_requested"  # server-written: the approvals services
    APPROVAL_RESOLVED = "approval_resolved"
    BUDGET_REACHED = "budget_reached"  # the runner stopped a turn at its budget


# What a runner may append. `terminal_status` and `user_message` are written by the server.
RUNNER_EVENT_TYPES = frozenset(
    {
        "backend_status",
        "agent_message",
        "agent_message_delta",
        "reasoning",
        "tool_call",
        "tool_output",
        "file_change",
        "token_usage",
        "log",
        "error",
        "budget_reached",
    }
)
RUNNER_EVENT_TYPE_CHOICES = [(name, name) for name in sorted(RUNNER_EVENT_TYPES)]


# How a run ended: the terminal transition writes them together, the API and admin show them.
RUN_OUTCOME_FIELDS = ("terminal_status", "failure_kind", "failure_message")
# A cancel request's mark on the run or command it targets (SPEC §9.7).
CANCEL_MARK_FIELDS = ("cancel_epoch", "cancel_request_id", "cancel_requested_at", "cancel_reason")


# The fields a person searches runs by, one lower-case text (seed `listRuns` search).
# makemigrations does not see a change of it: one needs a migration that rebuilds the
# trigram index, and 0007 must then freeze the list it built (as 0004 does).
RUN_SEARCH_FIELDS = (
    "id",
    "project_id",
    "backend_profile",
    "provider_id",
    "workspace_ref__path",
    "session_ref__session_id",
    "session_ref__metadata__title",
    "trace_sink__task_id",
    "trace_sink__lane",
    "failure_kind",
    "failure_message",
)


def run_search_document(fields: tuple[str, ...] = RUN_SEARCH_FIELDS) -> Lower:
    """The run list's search text. The trigram index is built on this very expression, so
    a `contains` on it is an index scan, not a scan of the tenant's history. (`fields`:
    for a migration that must rebuild an earlier version of the index.)"""
    parts: list[object] = []
    for name in fields:
        parts.extend([name, Value("\n")])
    # id and the other columns are text, Value("\n") is a CharField: say which.
    return Lower(Concat(*parts[:-1], output_field=TextField()))


class Run(SessionReferenced, TextIdModel, Timestamped, CancelMarked):
    tenant_id = models.TextField()
    project_id = models.TextField()
    workspace_ref = models.JSONField()
    session_ref = models.JSONField(null=True, blank=True)
    resource_bundle_ref = models.JSONField(null=True, blank=True)
    provider_id = models.TextField()
    backend_profile = models.TextField()
    execution_policy = models.JSONField()
    trace_sink = models.JSONField(null=True, blank=True)
    status = models.TextField(choices=RunStatus.choices, default=RunStatus.PENDING)
    terminal_status = models.TextField(null=True, blank=True)
    failure_kind = models.TextField(null=True, blank=True)
    failure_message = models.TextField(null=True, blank=True)
    claimed_by = models.TextField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Beyond the seed: every claim increments the epoch; runner writes carry it (SPEC §8).
    lease_epoch = models.IntegerField(default=0, db_default=0)
    # Approvals waiting for a person (runs.services.approvals keeps it under the run lock).
    pending_approvals = models.IntegerField(default=0, db_default=0)

    class Meta:
        db_table = "agentrun_runs"
        indexes = [
            models.Index(fields=["status", "updated_at"], name="agentrun_runs_status_idx"),
            # The run list's sorts within a tenant and, for an operator, across tenants: a page
            # walks one of these, never sorting the history (issue 16).
            models.Index(
                fields=["tenant_id", "-updated_at", "-id"], name="agentrun_runs_tenant_idx"
            ),
            models.Index(fields=["-updated_at", "-id"], name="agentrun_runs_recent_idx"),
            models.Index(
                fields=["tenant_id", "status", "-updated_at", "-id"],
                name="agentrun_runs_tstatus_idx",
            ),
            models.Index(fields=["tenant_id", "id"], name="agentrun_runs_tenant_id_idx"),
            GinIndex(
                OpClass(run_search_document(), name="gin_trgm_ops"),
                name="agentrun_runs_search_idx",
            ),
            # A session's runs, newest first (seed `agentrun_runs_session_idx`): the keyed
            # turn admission's replay lookup joins commands to these runs, so without it
            # every keyed turn scans all of agentrun_commands. `->` (not `->>`): the ORM's
            # `session_ref__session_id=` compares the jsonb value.
            models.Index(
                KeyTransform("session_id", "session_ref"),
                F("updated_at").desc(),
                name="agentrun_runs_session_idx",
            ),
            # A session's runs in admission order: the session stream walks them (issue 19).
            models.Index(
                KT("session_ref__session_id"),
                "created_at",
                "id",
                name="agentrun_runs_sess_order_idx",
            ),
            # Live runs by profile: the dispatcher's capacity count and the operator status read
            # only these, which stay few while terminal history grows.
            partial_index(
                "backend_profile",
                "status",
                where=models.Q(status__in=LIVE_RUN_STATUSES),
                name="agentrun_runs_live_idx",
            ),
        ]

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES

    def lease_expired(self, now: datetime) -> bool:
        return self.lease_expires_at is None or self.lease_expires_at <= now


class Command(TextIdModel, Timestamped, CancelMarked):
    # No index of its own: `agentrun_commands_run_seq_key` leads with run_id (issue 18, 0012).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="commands", db_index=False)
    seq = models.IntegerField()
    type = models.TextField(choices=CommandType.choices)
    payload = models.JSONField()
    payload_hash = models.TextField()
    idempotency_key = models.TextField(null=True, blank=True)
    state = models.TextField(choices=CommandState.choices, default=CommandState.PENDING)
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_commands"
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="agentrun_commands_run_seq_key"),
            unique_idempotency_key("run", name="agentrun_commands_run_idempotency_key_idx"),
        ]

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_COMMAND_STATES


class Event(TextIdModel):
    # No index of its own: `agentrun_events_run_seq_key` leads with run_id (issue 18, 0011).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.IntegerField()
    type = models.TextField(choices=EventType.choices)
    payload = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agentrun_events"
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="agentrun_events_run_seq_key"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class Runner(TextIdModel):
    # The tenant the runner registered for (null: an operator's runner of no run). A
    # registration from another tenant never rewrites the row (issue 16).
    tenant_id = models.TextField(null=True, blank=True)
    run_id = models.TextField(null=True, blank=True)
    attempt_id = models.TextField(null=True, blank=True)
    backend_profile = models.TextField(null=True, blank=True)
    placement = models.TextField(null=True, blank=True)
    source_commit = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict, db_default=EMPTY_OBJECT)
    registered_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agentrun_runners"


class Backend(models.Model):
    profile = models.TextField(primary_key=True)
    capabilities = models.JSONField()
    capacity = models.JSONField()
    health = models.JSONField()
    # Operator-set: the most a client's execution policy may ask for on this profile
    # (`runs.policy`: sandbox, approval_policy, approvals); {} = the defaults.
    policy_ceiling = models.JSONField(default=dict, blank=True, db_default=EMPTY_OBJECT)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agentrun_backends"

    def __str__(self) -> str:
        return self.profile


class Lease(models.Model):
    run = models.OneToOneField(
        Run, on_delete=models.CASCADE, primary_key=True, related_name="lease"
    )
    runner_id = models.TextField()
    lease_expires_at = models.DateTimeField()
    lease_epoch = models.IntegerField(default=0, db_default=0)
    stale_recovery_marker = models.JSONField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agentrun_leases"
        indexes = [models.Index(fields=["lease_expires_at"], name="agentrun_leases_expiry_idx")]

    def __str__(self) -> str:
        return f"{self.run_id} → {self.runner_id}"


class RunnerJob(TextIdModel, Timestamped):
    # No index of its own: `agentrun_rjobs_run_cmd_idx` leads with run_id (issue 18, 0011).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="runner_jobs", db_index=False
    )
    command = models.ForeignKey(Command, on_delete=models.CASCADE, related_name="runner_jobs")
    idempotency_key = models.TextField(null=True, blank=True)
    payload_hash = models.TextField()
    attempt_id = models.TextField()
    runner_id = models.TextField()
    namespace = models.TextField()
    job_name = models.TextField()
    manager_url = models.TextField()
    image = models.TextField()
    source_commit = models.TextField()
    service_account_name = models.TextField(null=True, blank=True)
    result = models.JSONField(default=dict)

    class Meta:
        db_table = "agentrun_runner_jobs"
        constraints = [
            unique_idempotency_key("run", name="agentrun_runner_jobs_run_idempotency_key_idx"),
        ]
        indexes = [
            models.Index(
                fields=["run", "command", "created_at"], name="agentrun_rjobs_run_cmd_idx"
            ),
        ]


# Cancel requests, approvals and quotas live in their own module; imported here so Django
# registers them as this app's models.
import runs.control_models  # noqa: E402, F401
