"""Admin for the work queue: an operator's view of the backlog.

The queue services own task and attempt state (the scheduler, retry, cancel and the
projector write it, each change taking a new version), so the screen is read-only; the
operator issue adds actions that call the services (cancel, retry).

`QueueAttempt` and `QueueReadCursor` are not registered: their primary keys are
`CompositePrimaryKey`s ((task, attempt), (task, reader)), which Django admin does not
support. A task's page shows its attempt history instead.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from queues.models import QueueAttempt, QueueTask
from runs.admin import ReadOnlyAdmin

ATTEMPT_COLUMNS = ("retry_index", "attempt_id", "state", "run_id", "failure_kind", "reason")


@admin.register(QueueTask)
class QueueTaskAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "tenant_id",
        "queue",
        "lane",
        "title",
        "priority",
        "state",
        "version",
        "updated_at",
    ]
    list_filter = ["state", "queue", "lane", "backend_profile", "tenant_id"]
    search_fields = ["=id", "title", "idempotency_key", "=project_id"]
    ordering = ["-priority", "created_at"]
    readonly_fields = ["attempt_history"]
    show_full_result_count = False

    @admin.display(description="attempts")
    def attempt_history(self, task: QueueTask) -> SafeString:
        attempts = QueueAttempt.objects.filter(task=task).order_by("retry_index")
        rows = format_html_join(
            "",
            "<tr>" + "<td>{}</td>" * len(ATTEMPT_COLUMNS) + "</tr>",
            (tuple(_cell(getattr(a, name)) for name in ATTEMPT_COLUMNS) for a in attempts),
        )
        header = format_html_join("", "<th>{}</th>", ((name,) for name in ATTEMPT_COLUMNS))
        return format_html_join("", "<table><tr>{}</tr>{}</table>", [(header, rows)])


def _cell(value: object) -> object:
    return "" if value is None else value
