"""Authentication and scoping of the v1 API (SPEC §3): who may call what, for which tenant."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from agentrun.hashing import secret_digest
from agentrun.models import ApiKey
from runs.models import Command, Run
from tests.api.helpers import (
    API,
    call,
    claimed_run_with_command,
    error_of,
    fencing,
    make_command,
    make_runner_job,
    revoke,
    run_body,
)
from tests.builders import api_client, key_client, make_run

pytestmark = pytest.mark.django_db

# Every route under /api/v1. Ids need not exist: authentication comes before any lookup.
ALL_ROUTES = [
    ("GET", "/runs"),
    ("POST", "/runs"),
    ("GET", "/runs/run_x"),
    ("POST", "/runs/run_x/cancel"),
    ("GET", "/runs/run_x/cancel-requests"),
    ("GET", "/runs/run_x/events"),
    ("POST", "/runs/run_x/events"),
    ("GET", "/runs/run_x/events/count"),
    ("GET", "/runs/run_x/commands"),
    ("POST", "/runs/run_x/commands"),
    ("POST", "/runs/run_x/claim"),
    ("POST", "/runs/run_x/heartbeat"),
    ("POST", "/runs/run_x/finish"),
    ("GET", "/runs/run_x/runner-jobs"),
    ("POST", "/runs/run_x/runner-jobs"),
    ("GET", "/commands/cmd_x"),
    ("POST", "/commands/cmd_x/ack"),
    ("POST", "/commands/cmd_x/finish"),
    ("POST", "/commands/cmd_x/cancel"),
    ("GET", "/commands/cmd_x/events"),
    ("PATCH", "/runner-jobs/rjob_x"),
    ("POST", "/runners"),
    ("GET", "/backends"),
]


# ---- 401 -----------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ALL_ROUTES)
def test_request_without_a_key_is_401_with_the_error_envelope(method: str, path: str) -> None:
    response = call(api_client(None), method, path)
    error = error_of(response, 401)
    assert error["code"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path"), ALL_ROUTES)
def test_unknown_key_is_401_on_every_route(method: str, path: str) -> None:
    response = call(api_client("ar_client_not-a-real-key-at-all"), method, path)
    assert error_of(response, 401)["code"] == "unauthorized"


def test_a_non_bearer_authorization_scheme_is_401() -> None:
    client = api_client(None)
    client.credentials(HTTP_AUTHORIZATION="Basic dXNlcjpwYXNz")
    assert error_of(client.get(f"{API}/runs"), 401)["code"] == "unauthorized"


def test_revoked_key_is_401() -> None:
    client = key_client(role="client")
    assert client.get(f"{API}/backends").status_code == 200
    revoke(client.api_key)
    assert error_of(client.get(f"{API}/backends"), 401)["code"] == "unauthorized"


# ---- tenants: another tenant's object is a 404 ---------------------------------------


def _tenant_a_run_and_command() -> tuple[Run, Command]:
    run = make_run(tenant_id="tenant-a")
    return run, make_command(run)


TENANT_SCOPED_ROUTES = [
    ("GET", "/runs/{run}"),
    ("GET", "/runs/{run}/events"),
    ("GET", "/runs/{run}/events/count"),
    ("GET", "/runs/{run}/commands"),
    ("POST", "/runs/{run}/commands"),
    ("POST", "/runs/{run}/cancel"),
    ("GET", "/runs/{run}/cancel-requests"),
    ("GET", "/runs/{run}/runner-jobs"),
    ("GET", "/commands/{command}"),
    ("POST", "/commands/{command}/cancel"),
    ("GET", "/commands/{command}/events"),
]


@pytest.mark.parametrize(("method", "template"), TENANT_SCOPED_ROUTES)
def test_client_key_of_another_tenant_gets_404_not_403(method: str, template: str) -> None:
    run, command = _tenant_a_run_and_command()
    intruder = key_client(role="client", tenant_id="tenant-b")
    body = {"type": "turn", "payload": {"text": "hi"}} if template.endswith("commands") else {}
    path = template.format(run=run.id, command=command.id)

    error = error_of(call(intruder, method, path, body), 404)

    assert error["code"] == "not_found"
    run.refresh_from_db()
    command.refresh_from_db()
    assert (run.status, command.state) == ("pending", "pending")
    assert Command.objects.filter(run=run).count() == 1


def test_another_tenants_run_looks_exactly_like_a_missing_run() -> None:
    run, _ = _tenant_a_run_and_command()
    intruder = key_client(role="client", tenant_id="tenant-b")
    hidden = error_of(intruder.get(f"{API}/runs/{run.id}"), 404)
    missing = error_of(intruder.get(f"{API}/runs/run_missing"), 404)
    assert hidden["message"].replace(run.id, "ID") == missing["message"].replace(
        "run_missing", "ID"
    )
    assert hidden["details"].keys() == missing["details"].keys()


def test_client_key_never_sees_another_tenants_runs_in_the_list() -> None:
    make_run(tenant_id="tenant-a", project_id="secret-project")
    own = make_run(tenant_id="tenant-b", project_id="own-project")
    listed = key_client(role="client", tenant_id="tenant-b").get(f"{API}/runs").json()
    assert [item["id"] for item in listed["items"]] == [own.id]
    assert listed["total"] == 1
    assert listed["facets"]["projects"] == ["own-project"]


def test_client_creates_runs_in_its_own_tenant_only() -> None:
    client = key_client(role="client", tenant_id="tenant-a")
    created = client.post(f"{API}/runs", run_body(), format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["tenant_id"] == "tenant-a"
    foreign = client.post(f"{API}/runs", run_body(tenant_id="tenant-b"), format="json")
    assert "tenant_id" in error_of(foreign, 400)["message"]
    assert not Run.objects.filter(tenant_id="tenant-b").exists()


# ---- runner keys: one run, the lease protocol only -----------------------------------


def test_runner_key_gets_404_for_any_other_run_and_its_commands() -> None:
    own, _, runner = claimed_run_with_command()
    other = make_run(tenant_id=own.tenant_id)
    other_command = make_command(other)

    assert error_of(runner.get(f"{API}/runs/{other.id}"), 404)["code"] == "not_found"
    assert error_of(runner.get(f"{API}/runs/{other.id}/events"), 404)
    assert error_of(runner.get(f"{API}/commands/{other_command.id}"), 404)
    claim = runner.post(f"{API}/runs/{other.id}/claim", {"runner_id": "r"}, format="json")
    assert error_of(claim, 404)
    ack = runner.post(f"{API}/commands/{other_command.id}/ack", fencing(own), format="json")
    assert error_of(ack, 404)
    other.refresh_from_db()
    other_command.refresh_from_db()
    assert (other.status, other_command.state) == ("pending", "pending")
    assert [item["id"] for item in runner.get(f"{API}/runs").json()["items"]] == [own.id]


def test_runner_key_gets_404_for_a_runner_job_of_another_run() -> None:
    _, _, runner = claimed_run_with_command()
    other = make_run()
    job = make_runner_job(other, make_command(other))
    patched = runner.patch(f"{API}/runner-jobs/{job.id}", {"result": {"x": 1}}, format="json")
    assert error_of(patched, 404)["code"] == "not_found"


@pytest.mark.parametrize(
    ("method", "template", "body"),
    [
        ("POST", "/runs/{run}/commands", {"type": "turn", "payload": {"text": "hi"}}),
        ("POST", "/runs/{run}/cancel", {"reason": "stop"}),
        ("POST", "/commands/{command}/cancel", {"reason": "stop"}),
        ("POST", "/runs", run_body()),
    ],
)
def test_runner_key_gets_403_for_client_only_actions_on_its_own_run(
    method: str, template: str, body: dict[str, object]
) -> None:
    run, command, runner = claimed_run_with_command()
    path = template.format(run=run.id, command=command.id)
    assert error_of(call(runner, method, path, body), 403)["code"] == "forbidden"
    run.refresh_from_db()
    assert run.status == "claimed"
    assert Command.objects.filter(run=run).count() == 1
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    ("template", "body"),
    [
        ("/runs/{run}/claim", {"runner_id": "runner-2"}),
        ("/runs/{run}/heartbeat", {"runner_id": "runner-1", "lease_epoch": 1}),
        ("/runs/{run}/finish", {"runner_id": "runner-1", "lease_epoch": 1,
                                "terminal_status": "completed"}),
        ("/runs/{run}/events", {"runner_id": "runner-1", "lease_epoch": 1, "type": "log"}),
        ("/runs/{run}/runner-jobs", {}),
        ("/commands/{command}/ack", {"runner_id": "runner-1", "lease_epoch": 1}),
        ("/commands/{command}/finish", {"runner_id": "runner-1", "lease_epoch": 1,
                                        "terminal_status": "completed"}),
        ("/runners", {"id": "runner-9"}),
    ],
)  # fmt: skip
def test_client_key_gets_403_on_runner_protocol_actions(
    template: str, body: dict[str, object]
) -> None:
    run, command, _ = claimed_run_with_command()
    events_before = run.events.count()
    client = key_client(role="client", tenant_id=run.tenant_id)
    path = template.format(run=run.id, command=command.id)

    assert error_of(call(client, "POST", path, body), 403)["code"] == "forbidden"

    run.refresh_from_db()
    command.refresh_from_db()
    assert (run.status, run.claimed_by, command.state) == ("claimed", "runner-1", "pending")
    assert run.events.count() == events_before


def test_client_key_gets_403_when_patching_a_runner_job() -> None:
    run, command, _ = claimed_run_with_command()
    job = make_runner_job(run, command)
    client = key_client(role="client", tenant_id=run.tenant_id)
    patched = client.patch(f"{API}/runner-jobs/{job.id}", {"result": {"x": 1}}, format="json")
    assert error_of(patched, 403)["code"] == "forbidden"
    job.refresh_from_db()
    assert job.result == {}


# ---- operators -----------------------------------------------------------------------


def test_operator_key_sees_every_tenant() -> None:
    run_a = make_run(tenant_id="tenant-a")
    run_b = make_run(tenant_id="tenant-b")
    operator = key_client(role="operator", tenant_id="ops")
    listed = operator.get(f"{API}/runs").json()
    assert {item["id"] for item in listed["items"]} == {run_a.id, run_b.id}
    assert listed["total"] == 2
    for run in (run_a, run_b):
        assert operator.get(f"{API}/runs/{run.id}").json()["tenant_id"] == run.tenant_id


def test_operator_creating_a_run_without_tenant_id_gets_400_naming_tenant_id() -> None:
    operator = key_client(role="operator", tenant_id="ops")
    error = error_of(operator.post(f"{API}/runs", run_body(), format="json"), 400)
    assert error["code"] == "invalid"
    assert "tenant_id" in error["message"]
    assert not Run.objects.exists()


def test_operator_creates_a_run_in_the_tenant_it_names() -> None:
    operator = key_client(role="operator", tenant_id="ops")
    created = operator.post(f"{API}/runs", run_body(tenant_id="tenant-c"), format="json")
    assert created.status_code == 201, created.json()
    assert Run.objects.get(pk=created.json()["id"]).tenant_id == "tenant-c"


def test_operator_may_speak_the_runner_protocol_for_any_run() -> None:
    run = make_run(tenant_id="tenant-z")
    operator = key_client(role="operator", tenant_id="ops")
    claimed = operator.post(f"{API}/runs/{run.id}/claim", {"runner_id": "op-r"}, format="json")
    assert claimed.status_code == 200, claimed.json()
    assert claimed.json()["claimed_by"] == "op-r"


# ---- create_api_key ------------------------------------------------------------------


def _create_api_key(*args: str) -> dict[str, str]:
    out = io.StringIO()
    call_command("create_api_key", *args, "--json", stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def test_create_api_key_prints_json_and_the_key_works_as_a_bearer_token() -> None:
    printed = _create_api_key("--tenant", "tenant-k", "--role", "client")
    assert set(printed) == {"id", "key", "tenant", "role"}
    assert (printed["tenant"], printed["role"]) == ("tenant-k", "client")
    own = make_run(tenant_id="tenant-k")
    make_run(tenant_id="tenant-other")
    listed = api_client(printed["key"]).get(f"{API}/runs")
    assert listed.status_code == 200, listed.json()
    assert [item["id"] for item in listed.json()["items"]] == [own.id]


def test_create_api_key_for_a_runner_is_scoped_to_its_run() -> None:
    own, other = make_run(), make_run()
    printed = _create_api_key("--tenant", "tenant-a", "--role", "runner", "--run", own.id)
    runner = api_client(printed["key"])
    assert runner.get(f"{API}/runs/{own.id}").status_code == 200
    assert error_of(runner.get(f"{API}/runs/{other.id}"), 404)


def test_create_api_key_for_a_runner_without_a_run_fails() -> None:
    with pytest.raises(CommandError, match="run"):
        _create_api_key("--tenant", "tenant-a", "--role", "runner")
    assert not ApiKey.objects.exists()


def test_api_key_is_stored_only_as_a_digest() -> None:
    printed = _create_api_key("--tenant", "tenant-a", "--role", "operator")
    row = ApiKey.objects.get(pk=printed["id"])
    assert row.key_digest == secret_digest(printed["key"])
    stored = [str(getattr(row, field.attname)) for field in ApiKey._meta.concrete_fields]
    assert not any(printed["key"] in value for value in stored)
