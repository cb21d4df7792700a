"""Routes of the runs API under /api/v1 (SPEC §3)."""

from django.urls import URLPattern, path
from rest_framework.routers import SimpleRouter

from runs.api import approvals, long_poll, usage, views
from runs.api.stream_views import RunStreamView, sse_route

router = SimpleRouter(trailing_slash=False)
router.register("runs", views.RunViewSet, basename="run")
router.register("commands", views.CommandViewSet, basename="command")
router.register("runner-jobs", views.RunnerJobViewSet, basename="runner-job")
router.register("runners", views.RunnerViewSet, basename="runner")
router.register("backends", views.BackendViewSet, basename="backend")

# The events route is async under ASGI (its long-poll awaits on the event loop); the same
# DRF view still answers every request, and alone under WSGI or the test client.
urlpatterns = [
    URLPattern(p.pattern, long_poll.run_events(p.callback), p.default_args, p.name)
    if isinstance(p, URLPattern) and p.name == "run-events"
    else p
    for p in router.urls
]
urlpatterns.append(
    path("runs/<str:pk>/stream", sse_route(RunStreamView.as_view()), name="run-stream")
)

urlpatterns += [
    path("runs/<str:pk>/approvals", approvals.RunApprovalsView.as_view()),
    path("runs/<str:pk>/approvals/<str:approval_id>", approvals.ApprovalView.as_view()),
    path("runs/<str:pk>/usage", usage.RunUsageView.as_view()),
    path("usage", usage.TenantUsageView.as_view()),
    path("quotas/<str:tenant_id>", usage.QuotaView.as_view()),
]
