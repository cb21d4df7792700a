"""Liveness and readiness (seed `health`): ready = database reachable, migrations applied."""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import Error as DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        connection.ensure_connection()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        body: dict[str, Any] = {"ready": False, "reachable": False, "migrations_applied": False}
        body["error"] = {
            "code": "not_ready",
            "failure_kind": "infra-failed",
            "message": f"database unreachable: {error.__class__.__name__}",
            "details": {},
        }
        return JsonResponse(body, status=503)
    if pending:
        names = [f"{migration.app_label}.{migration.name}" for migration, _ in pending]
        return JsonResponse(
            {
                "ready": False,
                "reachable": True,
                "migrations_applied": False,
                "error": {
                    "code": "not_ready",
                    "failure_kind": "infra-failed",
                    "message": f"{len(names)} migrations are not applied",
                    "details": {"pending": names},
                },
            },
            status=503,
        )
    return JsonResponse({"ready": True, "reachable": True, "migrations_applied": True})
