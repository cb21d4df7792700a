"""Admin for the runs app: an operator's view of runs and their parts.

The store owns run, command and event state (the services write it), so these screens
are read-only; the operator issue adds actions that call the services. The event table
is the biggest: no full COUNT(*) on its changelist.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from runs.models import Backend, CancelRequest, Command, Event, Lease, Run, Runner, RunnerJob


class ReadOnlyAdmin(admin.ModelAdmin):
    """Shows everything, changes nothing: writes go through the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "tenant_id",
        "project_id",
        "backend_profile",
        "status",
        "failure_kind",
        "claimed_by",
        "lease_expires_at",
        "updated_at",
    ]
    list_filter = ["status", "backend_profile", "tenant_id", "failure_kind", "updated_at"]
    search_fields = ["id", "project_id", "claimed_by"]
    date_hierarchy = "created_at"
    show_full_result_count = False


@admin.register(Command)
class CommandAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "seq", "type", "state", "idempotency_key", "updated_at"]
    list_filter = ["type", "state"]
    search_fields = ["id", "run__id", "idempotency_key"]
    list_select_related = ["run"]
    show_full_result_count = False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "seq", "type", "created_at"]
    list_filter = ["type"]
    search_fields = ["=id", "=run__id"]
    list_select_related = ["run"]
    show_full_result_count = False


@admin.register(Runner)
class RunnerAdmin(ReadOnlyAdmin):
    list_display = ["id", "run_id", "backend_profile", "placement", "heartbeat_at"]
    list_filter = ["backend_profile", "placement"]
    search_fields = ["id", "run_id"]


@admin.register(Backend)
class BackendAdmin(ReadOnlyAdmin):
    list_display = ["profile", "capacity", "health", "updated_at"]
    search_fields = ["profile"]


@admin.register(Lease)
class LeaseAdmin(ReadOnlyAdmin):
    list_display = ["run", "runner_id", "lease_epoch", "lease_expires_at", "updated_at"]
    search_fields = ["=run__id", "runner_id"]
    list_select_related = ["run"]


@admin.register(RunnerJob)
class RunnerJobAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "command", "runner_id", "namespace", "job_name", "created_at"]
    list_filter = ["namespace"]
    search_fields = ["id", "=run__id", "=command__id", "job_name"]
    list_select_related = ["run", "command"]


@admin.register(CancelRequest)
class CancelRequestAdmin(ReadOnlyAdmin):
    list_display = ["id", "target_kind", "target_id", "stage", "epoch", "reason", "created_at"]
    list_filter = ["target_kind", "stage"]
    search_fields = ["id", "target_id", "=run__id"]
