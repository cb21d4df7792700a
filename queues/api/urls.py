"""Routes of the work-queue API under /api/v1 (SPEC §3)."""

from rest_framework.routers import SimpleRouter

from queues.api import views

router = SimpleRouter(trailing_slash=False)
router.register("queue/tasks", views.QueueTaskViewSet, basename="queue-task")
router.register("queue", views.QueueViewSet, basename="queue")

urlpatterns = router.urls
