"""Routes of the runs API under /api/v1 (SPEC §3)."""

from rest_framework.routers import SimpleRouter

from runs.api import views

router = SimpleRouter(trailing_slash=False)
router.register("runs", views.RunViewSet, basename="run")
router.register("commands", views.CommandViewSet, basename="command")
router.register("runner-jobs", views.RunnerJobViewSet, basename="runner-job")
router.register("runners", views.RunnerViewSet, basename="runner")
router.register("backends", views.BackendViewSet, basename="backend")

urlpatterns = router.urls
