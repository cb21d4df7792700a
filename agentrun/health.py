"""Liveness, and the database half of readiness.

`/healthz` answers as long as the process serves. Readiness needs the worker and beat
heartbeats too, which live in `ops` (the project package imports no app), so `/readyz` is
`ops.readiness.readyz`, routed by `ops.urls` ahead of this module's `readyz`; the checks of
the database and of its migrations stay here, and `ops.readiness` composes them.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import Error as DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def database_checks() -> dict[str, dict[str, Any]]:
    """`database` (reachable, with the round trip of one query) and `migrations` (none
    pending)."""
    connection = connections[DEFAULT_DB_ALIAS]
    began = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        took_ms = round((time.perf_counter() - began) * 1000, 1)
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        failed = {"ok": False, "error": f"database unreachable: {error.__class__.__name__}"}
        return {"database": failed, "migrations": {"ok": False, "pending": None}}
    names = [f"{migration.app_label}.{migration.name}" for migration, _ in pending]
    return {
        "database": {"ok": True, "round_trip_ms": took_ms},
        "migrations": {"ok": not names, "pending": names},
    }


def readiness_response(checks: dict[str, dict[str, Any]]) -> JsonResponse:
    """200 when every check is ok, else 503 with the error envelope naming the failed ones."""
    failed = sorted(name for name, check in checks.items() if not check["ok"])
    body: dict[str, Any] = {"ready": not failed, "checks": checks}
    if failed:
        body["error"] = {
            "code": "not_ready",
            "failure_kind": "infra-failed",
            "message": "not ready: " + ", ".join(failed),
            "details": {"failed": failed},
        }
    return JsonResponse(body, status=503 if failed else 200)


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """The database half only (shadowed by `ops.readiness.readyz` at `/readyz`)."""
    return readiness_response(database_checks())
