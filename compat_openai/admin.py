"""Admin of the Agents API surface: a session's profile, read-only (it is written only
through `/openai/v1`)."""

from __future__ import annotations

from django.contrib import admin

from agentrun.admin_console import BigTableAdmin
from compat_openai.models import AgentSessionProfile


@admin.register(AgentSessionProfile)
class AgentSessionProfileAdmin(BigTableAdmin):
    list_display = ("session", "review", "created_at", "deleted_at")
    list_filter = ("review",)
    search_fields = ("session__session_id", "session__tenant_id")
