"""Admin for the runs app: an operator's view of runs and their parts.

The store owns run, command and event state (the services write it), so every screen is
read-only; the one write is the "cancel run" action, which calls `runs.services.cancellation`
exactly as `POST /runs/{id}/cancel` does. A run's page links to its session, queue task,
dispatch intents, outbox records, lease and runner jobs, and shows its latest commands and
events (newest last) with links to the full, paged lists. The big tables (events,
commands, runs) never run a full `COUNT(*)`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.db.models.expressions import Combinable
from django.http import HttpRequest
from django.utils.safestring import SafeString

from agentrun.admin_actions import OperatorActionsMixin, Outcome, operator_id, service_action
from agentrun.admin_console import (
    BigTableAdmin,
    ReadOnlyAdmin,
    RunLinkColumn,
    changelist_link,
    link,
    link_column,
    links,
    recent_table,
    short_json,
)
from queues.projection import task_id_of
from runs.control_models import Approval, CancelRequest, TenantQuota
from runs.models import (
    CANCEL_MARK_FIELDS,
    RUN_OUTCOME_FIELDS,
    Backend,
    Command,
    Event,
    Lease,
    Run,
    Runner,
    RunnerJob,
)
from runs.services.cancellation import cancel_run

RECENT = 50


def _cancel(request: HttpRequest, run: Run, reason: str) -> Outcome:
    outcome = cancel_run(run_id=run.id, reason=reason, requested_by=operator_id(request))
    if outcome.changed:
        return Outcome(True, f"cancelled ({outcome.cancel_request.id})")  # type: ignore[union-attr]
    return Outcome(False, f"already {outcome.run.status}")


class SessionFilter(admin.SimpleListFilter):
    """`?session=<id>`: the runs of one session (the session page links here)."""

    title = "session"
    parameter_name = "session"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> QuerySet[Run]:
        value = self.value()
        return queryset.filter(session_ref__session_id=value) if value else queryset


@admin.register(Run)
class RunAdmin(OperatorActionsMixin, BigTableAdmin):
    list_display = [
        "id",
        "tenant_id",
        "project_id",
        "backend_profile",
        "status",
        "failure_kind",
        "session",
        "claimed_by",
        "lease_expires_at",
        "updated_at",
    ]
    list_filter = [
        "status",
        "backend_profile",
        "tenant_id",
        "failure_kind",
        SessionFilter,
        "created_at",
        "updated_at",
    ]
    search_fields = ["=id", "=project_id", "=claimed_by"]
    ordering = ["-updated_at"]
    actions = [
        service_action(
            name="cancel_runs",
            description="Cancel selected runs",
            perform=_cancel,
            reason="cancelled by an operator from the admin",
        )
    ]
    readonly_fields = ["related", "recent_commands", "recent_events"]
    fieldsets = [
        (None, {"fields": ["id", "tenant_id", "project_id", "status", "related"]}),
        (
            "Outcome and claim",
            {
                "fields": [
                    *RUN_OUTCOME_FIELDS,
                    "claimed_by",
                    "lease_expires_at",
                    "lease_epoch",
                    *CANCEL_MARK_FIELDS,
                    "created_at",
                    "updated_at",
                ]
            },
        ),
        (
            "Specification",
            {
                "classes": ["collapse"],
                "fields": [
                    "backend_profile",
                    "provider_id",
                    "workspace_ref",
                    "session_ref",
                    "resource_bundle_ref",
                    "execution_policy",
                    "trace_sink",
                ],
            },
        ),
        ("Commands", {"fields": ["recent_commands"]}),
        ("Events", {"fields": ["recent_events"]}),
    ]

    session = link_column("agent_sessions_session", "session_id", "session")

    @admin.display(description="related")
    def related(self, run: Run) -> SafeString:
        return links(
            link("agent_sessions_session", run.session_id, f"session {run.session_id}"),
            link("queues_queuetask", task_id_of(run), "queue task"),
            changelist_link(
                "dispatch_runnerdispatchintent", "dispatch intents", run__id__exact=run.id
            ),
            changelist_link("outbox_kafkaeventoutbox", "outbox records", run__id__exact=run.id),
            changelist_link("runs_runnerjob", "runner jobs", run__id__exact=run.id),
            changelist_link("runs_cancelrequest", "cancel requests", run__id__exact=run.id),
            link("runs_lease", run.id, "lease") if Lease.objects.filter(run=run).exists() else None,
        )

    @admin.display(description="latest commands")
    def recent_commands(self, run: Run) -> SafeString:
        return recent_table(
            Command.objects.filter(run=run),
            order="seq",
            limit=RECENT,
            columns=[
                ("seq", lambda c: c.seq),
                ("command", lambda c: link("runs_command", c.id)),
                ("type", lambda c: c.type),
                ("state", lambda c: c.state),
                ("created", lambda c: c.created_at),
            ],
            more=changelist_link("runs_command", "all commands (paged)", run__id__exact=run.id),
        )

    @admin.display(description="latest events")
    def recent_events(self, run: Run) -> SafeString:
        return recent_table(
            Event.objects.filter(run=run),
            order="seq",
            limit=RECENT,
            columns=[
                ("seq", lambda e: link("runs_event", e.id, e.seq)),
                ("type", lambda e: e.type),
                ("payload", lambda e: short_json(e.payload)),
                ("created", lambda e: e.created_at),
            ],
            more=changelist_link("runs_event", "all events (paged)", run__id__exact=run.id),
        )


@admin.register(Command)
class CommandAdmin(RunLinkColumn, BigTableAdmin):
    list_display = ["id", "run_link", "seq", "type", "state", "idempotency_key", "updated_at"]
    list_filter = ["type", "state", "created_at"]
    search_fields = ["=id", "=run__id", "=idempotency_key"]
    readonly_fields = ["run_link", "dispatch_intent"]

    def get_ordering(self, request: HttpRequest) -> list[str | Combinable]:
        return ["seq"] if "run__id__exact" in request.GET else ["-id"]

    @admin.display(description="dispatch intent")
    def dispatch_intent(self, command: Command) -> SafeString:
        intent = getattr(command, "dispatch_intent", None)
        return link("dispatch_runnerdispatchintent", intent.id if intent else None)


@admin.register(Event)
class EventAdmin(RunLinkColumn, BigTableAdmin):
    list_display = ["id", "run_link", "seq", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["=id", "=run__id"]
    readonly_fields = ["run_link", "outbox_records"]

    def get_ordering(self, request: HttpRequest) -> list[str | Combinable]:
        """One run's events in seq order (newest last); all events newest first (ids are
        time-ordered, so the primary key index serves both)."""
        return ["seq"] if "run__id__exact" in request.GET else ["-id"]

    @admin.display(description="outbox")
    def outbox_records(self, event: Event) -> SafeString:
        return changelist_link("outbox_kafkaeventoutbox", "outbox record", q=event.id)


@admin.register(Runner)
class RunnerAdmin(RunLinkColumn, ReadOnlyAdmin):
    list_display = ["id", "run_link", "backend_profile", "placement", "heartbeat_at"]
    list_filter = ["backend_profile", "placement", "heartbeat_at"]
    search_fields = ["=id", "=run_id"]
    ordering = ["-heartbeat_at"]


@admin.register(Backend)
class BackendAdmin(ReadOnlyAdmin):
    list_display = ["profile", "capacity", "health", "updated_at"]
    search_fields = ["profile"]


@admin.register(Lease)
class LeaseAdmin(RunLinkColumn, ReadOnlyAdmin):
    list_display = ["run_link", "runner_id", "lease_epoch", "lease_expires_at", "updated_at"]
    list_filter = ["lease_expires_at"]
    search_fields = ["=run__id", "=runner_id"]
    ordering = ["lease_expires_at"]


@admin.register(RunnerJob)
class RunnerJobAdmin(RunLinkColumn, BigTableAdmin):
    list_display = [
        "id",
        "run_link",
        "command_id",
        "runner_id",
        "namespace",
        "job_name",
        "created_at",
    ]
    list_filter = ["namespace", "created_at"]
    search_fields = ["=id", "=run__id", "=command__id", "=job_name", "=runner_id"]
    ordering = ["-created_at"]


@admin.register(CancelRequest)
class CancelRequestAdmin(RunLinkColumn, BigTableAdmin):
    list_display = [
        "id",
        "target_kind",
        "target_id",
        "run_link",
        "stage",
        "epoch",
        "requested_by",
        "reason",
        "created_at",
    ]
    list_filter = ["target_kind", "stage", "created_at"]
    search_fields = ["=id", "=target_id", "=run__id"]
    ordering = ["-created_at"]


@admin.register(Approval)
class ApprovalAdmin(RunLinkColumn, BigTableAdmin):
    """Read-only: a person answers through the API (`POST /runs/{id}/approvals/{id}`),
    which records who decided; expiry and cancel resolve the rest."""

    list_display = ["id", "run_link", "kind", "state", "summary", "expires_at", "created_at"]
    list_filter = ["state", "kind", "created_at"]
    search_fields = ["=id", "=run__id", "=session_id", "=tenant_id"]
    ordering = ["-created_at"]


@admin.register(TenantQuota)
class TenantQuotaAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Operator-set, so editable here as through `PUT /api/v1/quotas/{tenant_id}`."""

    list_display = ["tenant_id", "max_tokens_per_day", "updated_at"]
    search_fields = ["=tenant_id"]
    ordering = ["tenant_id"]
