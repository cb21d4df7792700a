"""The operations console's routes, included by `agentrun.urls` before the admin's own
catch-all (`admin/status/` would otherwise be read as an admin app label)."""

from django.contrib import admin
from django.urls import path

from ops.dashboard import dashboard
from ops.metrics import metrics_view

urlpatterns = [
    path("admin/status/", admin.site.admin_view(dashboard), name="agentrun-status"),
    path("metrics", metrics_view, name="metrics"),  # no key: counts only
]
