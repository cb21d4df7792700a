"""Admin for runner dispatch intents: an operator's read-only view.

The dispatch services own every intent state, so nothing is editable here; the operator
issue adds actions (retry intent) that call the services. Terminal intents make up most
of the table over time: no full COUNT(*) on the changelist.
"""

from __future__ import annotations

from django.contrib import admin

from dispatch.models import RunnerDispatchIntent
from runs.admin import ReadOnlyAdmin


@admin.register(RunnerDispatchIntent)
class RunnerDispatchIntentAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "run",
        "command",
        "state",
        "attempt_count",
        "next_attempt_at",
        "lease_owner",
        "lease_expires_at",
        "dispatch_outcome",
        "actual_runner_job_id",
        "updated_at",
    ]
    list_filter = ["state", "kind", "dispatch_outcome"]
    search_fields = ["id", "run__id", "command__id", "runner_job_id", "actual_runner_job_id"]
    list_select_related = ["run", "command"]
    show_full_result_count = False
    ordering = ["-created_at"]
