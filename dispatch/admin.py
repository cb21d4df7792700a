"""Admin for runner dispatch intents: an operator's read-only view.

The dispatch services own every intent state, so nothing is editable here. The "retry now"
action calls `dispatch.services.retry_now.retry_intent_now`: an intent waiting after a
failed launch (or for capacity) becomes due at once; final intents are refused with the
reason. Terminal intents make up most of the table over time: no full COUNT(*).
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.safestring import SafeString

from agentrun.admin_actions import OperatorActionsMixin, Outcome, operator_id, service_action
from agentrun.admin_console import (
    BigTableAdmin,
    RunLinkColumn,
    changelist_link,
    link,
    link_column,
    links,
)
from dispatch.models import RunnerDispatchIntent
from dispatch.services.retry_now import retry_intent_now


def _retry_now(request: HttpRequest, intent: RunnerDispatchIntent, reason: str) -> Outcome:
    result = retry_intent_now(intent_id=intent.id, requested_by=operator_id(request))
    return Outcome(result.changed, result.reason)


@admin.register(RunnerDispatchIntent)
class RunnerDispatchIntentAdmin(RunLinkColumn, OperatorActionsMixin, BigTableAdmin):
    list_display = [
        "id",
        "run_link",
        "command_link",
        "state",
        "attempt_count",
        "next_attempt_at",
        "lease_owner",
        "lease_expires_at",
        "dispatch_outcome",
        "runner_job",
        "updated_at",
    ]
    list_filter = ["state", "kind", "dispatch_outcome", "next_attempt_at", "created_at"]
    search_fields = ["=id", "=run__id", "=command__id", "=runner_job_id", "=actual_runner_job_id"]
    ordering = ["-created_at"]
    readonly_fields = ["related"]
    actions = [
        service_action(
            name="retry_intents_now",
            description="Retry selected intents now (those waiting after a failed attempt)",
            perform=_retry_now,
        )
    ]

    command_link = link_column("runs_command", "command_id", "command")
    runner_job = link_column("runs_runnerjob", "actual_runner_job_id", "runner job")

    @admin.display(description="related")
    def related(self, intent: RunnerDispatchIntent) -> SafeString:
        return links(
            link("runs_run", intent.run_id, f"run {intent.run_id}"),
            link("runs_command", intent.command_id, f"command {intent.command_id}"),
            link("runs_runnerjob", intent.actual_runner_job_id, "runner job"),
            changelist_link("runs_event", "run events", run__id__exact=intent.run_id),
        )
