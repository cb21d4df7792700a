"""Routes of the sessions API under /api/v1 (SPEC §3)."""

from rest_framework.routers import SimpleRouter

from sessions.api import views

router = SimpleRouter(trailing_slash=False)
router.register("sessions", views.SessionViewSet, basename="session")

urlpatterns = router.urls
