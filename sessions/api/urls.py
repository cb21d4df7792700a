"""Routes of the sessions API under /api/v1 (SPEC §3)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from runs.api.stream_views import sse_route
from sessions.api import views
from sessions.api.stream_views import SessionStreamView, StreamTicketView

router = SimpleRouter(trailing_slash=False)
router.register("sessions", views.SessionViewSet, basename="session")

urlpatterns = [
    *router.urls,
    path(
        "sessions/<str:pk>/stream",
        sse_route(SessionStreamView.as_view()),
        name="session-stream",
    ),
    path("stream-tickets", StreamTicketView.as_view(), name="stream-tickets"),
]
