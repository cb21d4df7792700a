"""Routes of the webhooks API under /api/v1 (SPEC §9.5)."""

from rest_framework.routers import SimpleRouter

from webhooks.api import views

router = SimpleRouter(trailing_slash=False)
router.register("webhooks", views.WebhookEndpointViewSet, basename="webhook")
urlpatterns = router.urls
