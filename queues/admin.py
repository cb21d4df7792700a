"""Admin for the work queue: an operator's view of the backlog.

The queue services own task and attempt state (the scheduler, retry, cancel and the
projector write it, each change taking a new version), so the screen is read-only. The
"cancel task" action calls `queues.services.tasks.cancel_task`, as
`POST /queue/tasks/{id}/cancel` does (it cascades to the latest attempt's run). A task's
page shows its attempt history with links to each attempt's run and session.

`QueueAttempt` and `QueueReadCursor` are not registered: their primary keys are
`CompositePrimaryKey`s ((task, attempt), (task, reader)), which Django admin does not
support. A task's page shows its attempt history instead.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from agentrun.admin_actions import OperatorActionsMixin, Outcome, operator_id, service_action
from agentrun.admin_console import BigTableAdmin, link, links
from agentrun.tenancy import Scope
from queues.models import QueueAttempt, QueueTask
from queues.services.tasks import cancel_task

ATTEMPT_COLUMNS = ("retry_index", "attempt_id", "state", "run_id", "failure_kind", "reason")


def _cancel(request: HttpRequest, task: QueueTask, reason: str) -> Outcome:
    outcome = cancel_task(
        task_id=task.id, scope=Scope.operator(), reason=reason, requested_by=operator_id(request)
    )
    if outcome.changed:
        return Outcome(True, f"now {outcome.task.state}")
    return Outcome(False, f"already {outcome.task.state}")


@admin.register(QueueTask)
class QueueTaskAdmin(OperatorActionsMixin, BigTableAdmin):
    list_display = [
        "id",
        "tenant_id",
        "queue",
        "lane",
        "title",
        "priority",
        "state",
        "latest_run",
        "version",
        "updated_at",
    ]
    list_filter = [
        "state",
        "queue",
        "backend_profile",
        "tenant_id",
        "created_at",
        "updated_at",
    ]
    search_fields = ["=id", "title", "=idempotency_key", "=project_id", "=lane"]
    ordering = ["-priority", "created_at"]
    readonly_fields = ["related", "attempt_history"]
    actions = [
        service_action(
            name="cancel_tasks",
            description="Cancel selected tasks",
            perform=_cancel,
            reason="cancelled by an operator from the admin",
        )
    ]

    @admin.display(description="latest run")
    def latest_run(self, task: QueueTask) -> SafeString:
        return link("runs_run", _latest(task, "run_id"))

    @admin.display(description="related")
    def related(self, task: QueueTask) -> SafeString:
        run_id = _latest(task, "run_id")
        return links(
            link("runs_run", run_id, f"latest run {run_id}"),
            link("agent_sessions_session", task.session_id, f"session {task.session_id}"),
        )

    @admin.display(description="attempts")
    def attempt_history(self, task: QueueTask) -> SafeString:
        attempts = QueueAttempt.objects.filter(task=task).order_by("retry_index")
        rows = format_html_join(
            "",
            "<tr>" + "<td>{}</td>" * len(ATTEMPT_COLUMNS) + "</tr>",
            (tuple(_cell(a, name) for name in ATTEMPT_COLUMNS) for a in attempts),
        )
        header = format_html_join("", "<th>{}</th>", ((name,) for name in ATTEMPT_COLUMNS))
        return format_html_join("", "<table><tr>{}</tr>{}</table>", [(header, rows)])


def _latest(task: QueueTask, name: str) -> Any:
    return task.latest_attempt.get(name) if isinstance(task.latest_attempt, dict) else None


def _cell(attempt: QueueAttempt, name: str) -> object:
    value = getattr(attempt, name)
    if name == "run_id":
        return link("runs_run", value)
    return "" if value is None else value
