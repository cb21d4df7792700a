"""The operator dashboard: a page of the admin site showing what `agentrun_status` prints.

The view is wrapped by `admin.site.admin_view` (staff login, the admin's own CSRF and cache
rules) and mounted under `/admin/status/` by `ops.urls`; the admin index links to it
(`admin/ops/index.html`, installed by `install_index_link` from `ops.admin`). It only reads:
the facts come from `ops.status.collect_status`, the one selector module for operator status.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ops.status import collect_status

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
    return TemplateResponse(request, "admin/ops/dashboard.html", context)


def install_index_link() -> None:
    """Make the admin index link to the dashboard (a template extending the admin's)."""
    admin.site.index_template = "admin/ops/index.html"
    admin.site.site_header = "agentrun operations"
    admin.site.site_title = "agentrun"
