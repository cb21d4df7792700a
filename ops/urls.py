"""The operations console's routes, included by `agentrun.urls` at the root before its own
routes and the admin's catch-all (`admin/status/` would otherwise be read as an admin app
label; `/readyz` here wins over the database-only one of `agentrun.health`)."""

from django.contrib import admin
from django.urls import path

from ops.dashboard import dashboard
from ops.metrics import metrics_view
from ops.readiness import readyz

urlpatterns = [
    path("admin/status/", admin.site.admin_view(dashboard), name="agentrun-status"),
    path("metrics", metrics_view, name="metrics"),  # no key: counts only
    path("readyz", readyz, name="ops-readyz"),  # no key: which check fails, no data
]
