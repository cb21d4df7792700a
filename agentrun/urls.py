"""URL configuration: admin (and its status dashboard), health, metrics, the v1 API and its
OpenAPI document."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from agentrun import health, metrics
from agentrun.admin_site import dashboard_urls

urlpatterns = [
    *dashboard_urls(),  # /admin/status/, before the admin's own catch-all
    path("admin/", admin.site.urls),
    path("metrics", metrics.metrics_view, name="metrics"),  # no key: counts only
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/", include("runs.api.urls")),
    path("api/v1/dispatch/", include("dispatch.api.urls")),
    path("api/v1/", include("sessions.api.urls")),
    path("api/v1/", include("queues.api.urls")),
    path("api/v1/outbox/", include("outbox.api.urls")),
]
