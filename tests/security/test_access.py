"""Who may call what, and what another tenant can learn: every operation of the OpenAPI
document, with no key, another tenant's keys, a runner key of another run, and a client
key on operator routes."""

from __future__ import annotations

import pytest
from django.db import connection

from agentrun.auth import issue_api_key
from tests.builders import api_client, key_client
from tests.security.world import MISSING, World, call, make_world, operations

pytestmark = pytest.mark.django_db
OPERATOR_ONLY = {
    ("GET", "/dispatch/status"),
    ("GET", "/outbox/status"),
    # Usage across tenants and the tenant quotas an operator sets (SPEC §9.4).
    ("GET", "/usage"),
    ("GET", "/quotas/{tenant_id}"),
    ("PUT", "/quotas/{tenant_id}"),
    ("DELETE", "/quotas/{tenant_id}"),
}
# Session ids are chosen by clients and global (the seed's primary key): a PUT or a turn on
# a free id creates the session, on another tenant's id it is a 404. See README.md.
CREATES_ON_MISSING = {("PUT", "/sessions/{id}"), ("POST", "/sessions/{id}/turns")}
FENCE = {"runner_id": "runner-1", "lease_epoch": 1}
RUN_SPEC = {"project_id": "proj-1", "workspace_ref": {"path": "/w"}, "provider_id": "openai",
            "backend_profile": "scripted"}  # fmt: skip
# Valid bodies, so that a refusal comes from the lookup and not from validation.
BODIES: dict[tuple[str, str], dict[str, object]] = {
    ("POST", "/runs/{id}/cancel"): {"reason": "x"},
    ("POST", "/runs/{id}/commands"): {"type": "turn", "payload": {"text": "x"}},
    ("POST", "/runs/{id}/claim"): {"runner_id": "runner-9"},
    ("POST", "/runs/{id}/heartbeat"): FENCE,
    ("POST", "/runs/{id}/finish"): {**FENCE, "terminal_status": "completed"},
    ("POST", "/runs/{id}/events"): {**FENCE, "type": "log", "payload": {}},
    ("POST", "/runs/{id}/runner-jobs"): {
        "command_id": "cmd_x", "attempt_id": "a", "runner_id": "r", "namespace": "n",
        "job_name": "j", "manager_url": "http://127.0.0.1", "image": "i", "source_commit": "c",
    },
    ("POST", "/runs/{id}/approvals"): {
        **FENCE, "command_id": "cmd_x", "request_key": "k", "kind": "command", "summary": "s",
    },
    ("POST", "/runs/{id}/approvals/{approval_id}"): {"decision": "approve"},
    ("POST", "/commands/{id}/ack"): FENCE,
    ("POST", "/commands/{id}/finish"): {**FENCE, "terminal_status": "completed"},
    ("POST", "/commands/{id}/cancel"): {"reason": "x"},
    ("PATCH", "/runner-jobs/{id}"): {"result": {"x": 1}},
    ("PUT", "/sessions/{id}"): {"project_id": "proj-1", "backend_profile": "scripted"},
    ("POST", "/sessions/{id}/turns"): {"run": RUN_SPEC, "command": {"payload": {"text": "x"}}},
    ("POST", "/sessions/{id}/steer"): {"payload": {"text": "x"}},
    ("POST", "/sessions/{id}/cancel"): {"reason": "x"},
    ("POST", "/sessions/{id}/read"): {"reader_id": "r"},
    ("PUT", "/sessions/{id}/storage"): {"storage_kind": "none"},
    ("POST", "/queue/tasks/{id}/cancel"): {"reason": "x"},
    ("POST", "/queue/tasks/{id}/read"): {"reader_id": "r"},
    ("POST", "/queue/tasks/{id}/retry"): {"idempotency_key": "k", "reason": "r"},
    ("POST", "/queue/tasks/{id}/attempts/{attempt_id}/failure"): {
        "failure_kind": "backend-failed", "failure_message": "m",
    },
}  # fmt: skip


def _state() -> str:
    """A fingerprint of every row an operation could have written."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM agentrun_events), (SELECT count(*) FROM "
            "agentrun_commands), (SELECT count(*) FROM agentrun_cancel_requests), "
            "(SELECT max(version) FROM agentrun_sessions), (SELECT max(version) FROM "
            "agentrun_queue_tasks), (SELECT count(*) FROM agentrun_runners), "
            "(SELECT string_agg(status || lease_epoch, ',' ORDER BY id) FROM agentrun_runs)"
        )
        return repr(cursor.fetchone())


@pytest.fixture
def world_a() -> World:
    return make_world("tenant-a")


@pytest.mark.parametrize(("method", "template"), operations())
def test_every_operation_without_a_key_is_401(method: str, template: str) -> None:
    response = call(api_client(None), method, MISSING.path(template))
    assert response.status_code == 401, (method, template, response.content[:200])
    assert response.json()["error"]["code"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")


def _intruders() -> dict[str, object]:
    own = make_world("tenant-b")
    return {
        "client": key_client(role="client", tenant_id="tenant-b"),
        "runner": key_client(role="runner", tenant_id="tenant-b", run_id=own.run_id),
    }


def test_another_tenants_objects_answer_exactly_as_missing_ones(world_a: World) -> None:
    """For every operation that names an object, another tenant's key gets what it would
    get for an id that does not exist (404, or the 403 its role gets anyway), and nothing
    is written."""
    intruders = _intruders()
    before = _state()
    checked = 0
    for method, template in operations():
        if "{id}" not in template:
            continue
        for role, client in intruders.items():
            body = BODIES.get((method, template))
            foreign = call(client, method, world_a.path(template), body)  # type: ignore[arg-type]
            seen = (foreign.status_code, foreign.json()["error"]["code"])
            if (method, template) in CREATES_ON_MISSING and role == "client":
                assert seen == (404, "not_found"), (method, template)
                continue
            missing = call(client, method, MISSING.path(template), body)  # type: ignore[arg-type]
            assert missing.status_code >= 400, (role, method, template, missing.content[:200])
            assert seen == (missing.status_code, missing.json()["error"]["code"]), (
                role,
                method,
                template,
            )
            assert foreign.status_code in (403, 404), (role, method, template, seen)
            checked += 1
    assert _state() == before
    print(f"\n{checked} object operations x 2 keys of another tenant: 404/403 as for a missing id")


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/runs", "items"),
        ("/sessions", "items"),
        ("/sessions?state=unread&reader_id=r", "items"),
        ("/queue/tasks", "items"),
        ("/queue/tasks?changed_after=0", "items"),
    ],
)
def test_another_tenants_collections_are_empty(world_a: World, path: str, key: str) -> None:
    page = key_client(role="client", tenant_id="tenant-b").get(f"/api/v1{path}")
    assert page.status_code == 200, page.content
    assert page.json()[key] == []
    assert world_a.tenant not in page.content.decode()


def test_another_tenants_queue_figures_count_nothing(world_a: World) -> None:
    client = key_client(role="client", tenant_id="tenant-b")
    stats = client.get("/api/v1/queue/stats").json()
    assert world_a.task_id not in str(stats) and "tenant-a" not in str(stats)
    commander = client.get("/api/v1/queue/commander?reader_id=r").json()
    assert world_a.task_id not in str(commander)


def test_a_runner_key_reaches_its_own_run_only(world_a: World) -> None:
    other = make_world("tenant-a")  # same tenant, another run
    runner = key_client(role="runner", tenant_id="tenant-a", run_id=world_a.run_id)
    assert runner.get(f"/api/v1/runs/{world_a.run_id}").status_code == 200
    before = _state()
    for method, template in operations():
        if "{id}" not in template:
            continue
        response = call(runner, method, other.path(template), BODIES.get((method, template)))
        assert response.status_code in (403, 404), (method, template, response.status_code)
    listed = runner.get("/api/v1/runs").json()["items"]
    assert [run["id"] for run in listed] == [world_a.run_id]
    assert _state() == before


def test_the_operator_only_routes_are_the_status_usage_and_quota_routes(world_a: World) -> None:
    operator = key_client(role="operator", tenant_id="ops")
    others = [
        key_client(role="client", tenant_id="tenant-a"),
        key_client(role="runner", tenant_id="tenant-a", run_id=world_a.run_id),
    ]
    refused = {
        (method, template)
        for method, template in operations()
        if "{id}" not in template
        and all(
            call(key, method, template, BODIES.get((method, template))).status_code == 403
            for key in others
        )
        and call(operator, method, template).status_code != 403
    }
    assert refused == OPERATOR_ONLY


@pytest.mark.parametrize(("method", "template"), sorted(OPERATOR_ONLY))
def test_operator_only_routes_refuse_clients_and_runners(
    world_a: World, method: str, template: str
) -> None:
    for role, run_id in (("client", None), ("runner", world_a.run_id)):
        client = key_client(role=role, tenant_id="tenant-a", run_id=run_id)
        assert call(client, method, template).json()["error"]["code"] == "forbidden"
    operator = key_client(role="operator", tenant_id="ops")
    answer = call(operator, method, template).status_code
    # Through the role gate: the status routes answer 200; a quota of a tenant that has
    # none is a 404, and a PUT without a body a 400.
    assert answer == 200 if "quotas" not in template else answer in (400, 404)


def test_sessions_and_queue_are_closed_to_runner_keys(world_a: World) -> None:
    runner = key_client(role="runner", tenant_id="tenant-a", run_id=world_a.run_id)
    for path in ("/sessions", f"/sessions/{world_a.session_id}", "/queue/tasks", "/queue/stats"):
        assert runner.get(f"/api/v1{path}").status_code == 403, path


def test_a_revoked_or_foreign_looking_key_is_401() -> None:
    issued = issue_api_key(tenant_id="tenant-a", role="client")
    tampered = issued.secret[:-1] + ("A" if issued.secret[-1] != "A" else "B")
    assert api_client(tampered).get("/api/v1/runs").status_code == 401
    assert api_client(issued.secret).get("/api/v1/runs").status_code == 200
