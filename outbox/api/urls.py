"""Routes of the outbox API under /api/v1/outbox/."""

from django.urls import path

from outbox.api import views

urlpatterns = [
    path("status", views.OutboxStatusView.as_view(), name="outbox-status"),
]
