"""The interface deployed clients and workers depend on is pinned, not only documented:
issue 14 is moves and renames, and its must-show is that task names and API routes are
unchanged. A route or task added, removed or renamed on purpose updates these lists in
the same commit, so a review sees it.

`tests/api/test_openapi.py` checks that the schema documents every route; this file
checks that the set itself stays as it was. `tests/test_celery_config.py` checks that each
`TaskName` has one task, a route and a beat entry; this file pins the names a queued
message or another process's beat schedule carries.
"""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

from agentrun.celery import app

API_OPERATIONS = """
DELETE /api/v1/quotas/{tenant_id}
DELETE /api/v1/webhooks/{id}
GET /api/v1/backends
GET /api/v1/commands/{id}
GET /api/v1/commands/{id}/events
GET /api/v1/dispatch/status
GET /api/v1/outbox/status
GET /api/v1/queue/commander
GET /api/v1/queue/stats
GET /api/v1/queue/tasks
GET /api/v1/queue/tasks/{id}
GET /api/v1/queue/tasks/{id}/attempts
GET /api/v1/quotas/{tenant_id}
GET /api/v1/runs
GET /api/v1/runs/{id}
GET /api/v1/runs/{id}/approvals
GET /api/v1/runs/{id}/approvals/{approval_id}
GET /api/v1/runs/{id}/cancel-requests
GET /api/v1/runs/{id}/commands
GET /api/v1/runs/{id}/events
GET /api/v1/runs/{id}/events/count
GET /api/v1/runs/{id}/runner-jobs
GET /api/v1/runs/{id}/stream
GET /api/v1/runs/{id}/usage
GET /api/v1/sessions
GET /api/v1/sessions/{id}
GET /api/v1/sessions/{id}/output
GET /api/v1/sessions/{id}/resource-run
GET /api/v1/sessions/{id}/stream
GET /api/v1/sessions/{id}/trace
GET /api/v1/sessions/{id}/usage
GET /api/v1/usage
GET /api/v1/webhooks
GET /api/v1/webhooks/{id}
GET /api/v1/webhooks/{id}/deliveries
PATCH /api/v1/runner-jobs/{id}
PATCH /api/v1/webhooks/{id}
POST /api/v1/commands/{id}/ack
POST /api/v1/commands/{id}/cancel
POST /api/v1/commands/{id}/finish
POST /api/v1/queue/tasks
POST /api/v1/queue/tasks/{id}/attempts/{attempt_id}/activate
POST /api/v1/queue/tasks/{id}/attempts/{attempt_id}/failure
POST /api/v1/queue/tasks/{id}/cancel
POST /api/v1/queue/tasks/{id}/read
POST /api/v1/queue/tasks/{id}/retry
POST /api/v1/runners
POST /api/v1/runs
POST /api/v1/runs/{id}/approvals
POST /api/v1/runs/{id}/approvals/{approval_id}
POST /api/v1/runs/{id}/cancel
POST /api/v1/runs/{id}/claim
POST /api/v1/runs/{id}/commands
POST /api/v1/runs/{id}/events
POST /api/v1/runs/{id}/finish
POST /api/v1/runs/{id}/heartbeat
POST /api/v1/runs/{id}/runner-jobs
POST /api/v1/sessions/{id}/cancel
POST /api/v1/sessions/{id}/read
POST /api/v1/sessions/{id}/steer
POST /api/v1/sessions/{id}/storage/evict
POST /api/v1/sessions/{id}/turns
POST /api/v1/stream-tickets
POST /api/v1/webhooks
POST /api/v1/webhooks/{id}/replay
POST /api/v1/webhooks/{id}/rotate-secret
PUT /api/v1/queue/tasks/{id}/attempt
PUT /api/v1/quotas/{tenant_id}
PUT /api/v1/sessions/{id}
PUT /api/v1/sessions/{id}/storage
"""

# Routes outside the OpenAPI document (the Agents API surface and the probes), by path.
OTHER_ROUTES = """
/api/schema
/healthz
/metrics
/readyz
/openai/v1/agents/sessions
/openai/v1/agents/sessions/{}
/openai/v1/agents/sessions/{}/events
/openai/v1/agents/sessions/{}/items
/openai/v1/agents/sessions/{}/turns
/openai/v1/agents/sessions/{}/turns/{}
/openai/v1/agents/sessions/{}/turns/{}/items
"""

TASK_NAMES = {
    "agentrun.doctor_report",
    "dispatch.dispatch_batch",
    "dispatch.reap_leases",
    "dispatch.reconcile_runner_jobs",
    "outbox.prune",
    "outbox.relay_batch",
    "queue.schedule_batch",
    "runs.expire_approvals",
    "webhooks.relay_batch",
}


def _lines(block: str) -> set[str]:
    return {line for line in block.splitlines() if line}


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> set[str]:
    """Every URL path of the project but the admin's, its parameters blanked as `{}`."""
    found: set[str] = set()
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found |= _routes(pattern.url_patterns, route)
        elif not route.startswith("admin/"):
            path = re.sub(r"\(\?P<\w+>[^)]*\)|<[^>]+>", "{}", "/" + route)
            found.add(path.replace("^", "").replace("$", "").replace("\\.", "."))
    return found


@pytest.mark.django_db
def test_the_api_operations_are_unchanged() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = {
        f"{method.upper()} {path}"
        for path, item in schema["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }
    assert operations == _lines(API_OPERATIONS)


def test_the_routes_outside_the_schema_are_unchanged() -> None:
    documented = {re.sub(r"\{\w+\}", "{}", op.split(" ", 1)[1]) for op in _lines(API_OPERATIONS)}
    routes = _routes(get_resolver().url_patterns)
    assert routes - documented == _lines(OTHER_ROUTES)


def test_the_celery_task_names_are_unchanged() -> None:
    app.loader.import_default_modules()
    assert {str(name) for name in app.tasks if not name.startswith("celery.")} == TASK_NAMES
