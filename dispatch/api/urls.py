"""Routes of the dispatch API under /api/v1/dispatch/ (SPEC §3)."""

from django.urls import path

from dispatch.api import views

urlpatterns = [
    path("status", views.DispatchStatusView.as_view(), name="dispatch-status"),
]
