"""`/readyz`: the database, its migrations, a live Celery worker and a live beat, each
reported with its age; not ready (503) while any of them fails.

A server whose worker died cannot make progress (turns stay pending, the outbox grows), so
readiness must say so; liveness (`/healthz`) does not, or a load balancer would restart
healthy servers for a worker's death.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from agentrun.health import database_checks, readiness_response
from ops.heartbeats import liveness


def readiness_checks() -> dict[str, dict[str, Any]]:
    checks = database_checks()
    if checks["database"]["ok"]:
        for name, state in liveness().items():
            checks[name] = {k: v for k, v in state.items() if k not in ("pid", "hostname")}
    else:
        checks["worker"] = {"ok": False, "age_seconds": None}
        checks["beat"] = {"ok": False, "age_seconds": None}
    return checks


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    return readiness_response(readiness_checks())
