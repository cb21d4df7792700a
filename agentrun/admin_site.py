"""The operator dashboard: a page of the admin site showing what `agentrun_status` prints.

The view is wrapped by `admin.site.admin_view` (staff login, the admin's own CSRF and cache
rules) and mounted under `/admin/status/` by `agentrun.urls`; the admin index links to it
(`admin/agentrun/index.html`, installed by `install_index_link`). It only reads: the facts
come from `agentrun.status.collect_status`, the one selector module for operator status.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from agentrun.status import collect_status

DASHBOARD_ITEMS = 10


def dashboard(request: HttpRequest) -> TemplateResponse:
    """The status page: backlogs and oldest items, runs, sessions, stale runners."""
    status = collect_status(items=DASHBOARD_ITEMS)
    error = status["outbox"]["first_error"]
    context = {
        **admin.site.each_context(request),
        "title": "agentrun status",
        "status": status,
        "first_error": json.dumps(error, sort_keys=True) if error else None,
    }
    return TemplateResponse(request, "admin/agentrun/dashboard.html", context)


def dashboard_urls() -> list[URLPattern]:
    """The dashboard's URL, to list before `admin/` (so the admin's catch-all never sees it)."""
    return [path("admin/status/", admin.site.admin_view(dashboard), name="agentrun-status")]


def install_index_link() -> None:
    """Make the admin index link to the dashboard (a template extending the admin's)."""
    admin.site.index_template = "admin/agentrun/index.html"
    admin.site.site_header = "agentrun operations"
    admin.site.site_title = "agentrun"
