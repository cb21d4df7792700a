"""Admin for the sessions app: an operator's view of sessions.

The session row is a projection the runs and sessions services write (every visible
change takes a new global version), so the screen is read-only; the operator issue adds
actions that call the services (mark read, cancel, evict).

`SessionReadCursor` is not registered: its primary key is a `CompositePrimaryKey`
(session, reader), which Django admin does not support.
"""

from __future__ import annotations

from django.contrib import admin

from runs.admin import ReadOnlyAdmin
from sessions.models import Session


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = [
        "session_id",
        "tenant_id",
        "project_id",
        "backend_profile",
        "execution_state",
        "active_run_id",
        "last_run_id",
        "version",
        "updated_at",
    ]
    list_filter = ["execution_state", "backend_profile", "tenant_id", "storage_kind"]
    search_fields = ["session_id", "tenant_id", "active_run_id"]
    ordering = ["-updated_at"]
    show_full_result_count = False
