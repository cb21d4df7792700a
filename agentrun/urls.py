"""URL configuration: admin, health, the v1 API and its OpenAPI document, and the operations
console (the status dashboard and `/metrics`).

Every app is reached by a dotted string (`include("ops.urls")`), never an import: the
project package is the foundation and imports no app.
"""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from agentrun import health, throttle

urlpatterns = [
    path("", include("ops.urls")),  # /admin/status/ and /metrics, before the admin's catch-all
    path("admin/login/", throttle.admin_login),  # 429 past the failed-login limit
    path("admin/", admin.site.urls),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/", include("runs.api.urls")),
    path("api/v1/dispatch/", include("dispatch.api.urls")),
    path("api/v1/", include("sessions.api.urls")),
    path("api/v1/", include("queues.api.urls")),
    path("api/v1/outbox/", include("outbox.api.urls")),
    path("api/v1/", include("webhooks.api.urls")),
    path("openai/v1/", include("compat_openai.api.urls")),  # the SDK's base_url (issue 22)
]

# Django's own error answers (unknown URL, bad request, server error) as the JSON envelope;
# `/admin/` keeps Django's pages (agentrun/error_views.py).
handler400 = "agentrun.error_views.bad_request"
handler403 = "agentrun.error_views.permission_denied"
handler404 = "agentrun.error_views.page_not_found"
handler500 = "agentrun.error_views.server_error"
