"""Cell 2's URLconf: the bench's reference routes, then agentrun's own (`agentrun.urls`).

The references sit under `/api/` so that the middleware treats them as it treats the real
endpoint (the Browser* middleware skip `/api/`). They come first: a real request tries one
prefix more (`api/v1/bench/`, a failed string match) before agentrun's own routes, which
then resolve exactly as in production.
"""

from django.urls import URLPattern, URLResolver, include, path
from rest_framework.routers import SimpleRouter

from agentrun import urls as agentrun_urls
from bench import http_floor
from runs.api.long_poll import run_events

# The DRF floor is routed as the real route is: the same router shape and action mapping,
# wrapped in the same sync/async events route (`runs.api.urls`).
_router = SimpleRouter(trailing_slash=False)
_router.register("runs", http_floor.FloorRunViewSet, basename="bench-floor-run")
_floor_route = next(
    URLPattern(p.pattern, run_events(p.callback), p.default_args, p.name)
    for p in _router.urls
    if isinstance(p, URLPattern) and p.name == "bench-floor-run-events"
)

_bench: list[URLPattern | URLResolver] = [
    path("floor/", include([_floor_route])),
    path("django/runs/<str:pk>/events", http_floor.bare_django_append, name="bench-django"),
]

urlpatterns = [path("api/v1/bench/", include(_bench)), *agentrun_urls.urlpatterns]

handler400 = agentrun_urls.handler400
handler403 = agentrun_urls.handler403
handler404 = agentrun_urls.handler404
handler500 = agentrun_urls.handler500
