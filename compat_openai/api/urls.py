"""Routes of the OpenAI Agents API surface under /openai/v1/ (the SDK's `base_url`)."""

from django.urls import path

from compat_openai.api import views
from compat_openai.stream import sdk_sse_route

SESSION = "agents/sessions/<str:session_id>"

urlpatterns = [
    path("agents/sessions", views.SessionsView.as_view()),
    path(SESSION, views.SessionView.as_view()),
    path(f"{SESSION}/events", sdk_sse_route(views.EventsView.as_view())),
    path(f"{SESSION}/items", views.ItemsView.as_view()),
    path(f"{SESSION}/turns", views.TurnsView.as_view()),
    path(f"{SESSION}/turns/<str:turn_id>", views.TurnView.as_view()),
    path(f"{SESSION}/turns/<str:turn_id>/items", views.TurnItemsView.as_view()),
]
