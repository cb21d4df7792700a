"""The happy paths of the runs API over HTTP: create, list, the runner protocol, cancel,
events, runner jobs, backends, health and the OpenAPI document (SPEC §3, §8)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from agentrun.tenancy import Scope
from ops.models import ProcessHeartbeat, ProcessKind
from runs import selectors
from runs.models import Event, Run
from runs.services.cancellation import cancel_run
from runs.services.lifecycle import claim_run
from tests.api.helpers import (
    API,
    call,
    claimed_run_with_command,
    error_of,
    fencing,
    make_command,
    make_runner_job,
    run_body,
    runner_for,
    runner_job_body,
)
from tests.builders import key_client, key_of, make_claimed_run, make_run

pytestmark = pytest.mark.django_db

SEEDED_PROFILES = {"codex", "deepseek", "minimax-m3", "dsflash-go", "scripted"}


def _post(client: APIClient, path: str, body: dict[str, Any]) -> Any:
    return client.post(f"{API}{path}", body, format="json")


# ---- create ---------------------------------------------------------------------------


def test_create_run_then_replaying_the_reserved_id_returns_the_same_run() -> None:
    client = key_client(role="client")
    created = _post(client, "/runs", run_body(id="run-reserved-1"))
    assert created.status_code == 201, created.json()
    assert (created.json()["id"], created.json()["status"]) == ("run-reserved-1", "pending")

    replayed = _post(client, "/runs", run_body(id="run-reserved-1"))
    assert replayed.status_code == 200, replayed.json()
    assert replayed.json() == created.json()
    assert Run.objects.count() == 1


def test_reserved_id_with_a_different_input_is_a_409() -> None:
    client = key_client(role="client")
    assert _post(client, "/runs", run_body(id="run-reserved-2")).status_code == 201
    mismatch = _post(client, "/runs", run_body(id="run-reserved-2", project_id="other"))
    assert error_of(mismatch, 409)["code"] == "conflict"
    assert Run.objects.get(pk="run-reserved-2").project_id == "proj-1"


def test_command_idempotency_key_replays_and_a_different_payload_is_a_409() -> None:
    run = make_run()
    client = key_client(role="client")
    body = {"type": "turn", "payload": {"text": "hi"}, "idempotency_key": "k1"}
    first = _post(client, f"/runs/{run.id}/commands", body)
    assert first.status_code == 201, first.json()
    assert (first.json()["seq"], first.json()["state"]) == (1, "pending")
    again = _post(client, f"/runs/{run.id}/commands", body)
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])
    other = _post(client, f"/runs/{run.id}/commands", {**body, "payload": {"text": "bye"}})
    assert error_of(other, 409)["code"] == "idempotency_mismatch"


def test_command_with_dispatch_records_a_pending_dispatch_intent() -> None:
    run = make_run()
    body = {"type": "turn", "payload": {"text": "go"}, "dispatch": {}}
    created = _post(key_client(role="client"), f"/runs/{run.id}/commands", body)
    assert created.status_code == 201, created.json()
    intent = created.json()["dispatch_intent"]
    assert (intent["state"], intent["attempt_count"]) == ("pending", 0)
    plain = _post(key_client(role="client"), f"/runs/{run.id}/commands", {**body, "dispatch": None})
    assert plain.json()["dispatch_intent"] is None


# ---- list -----------------------------------------------------------------------------


@pytest.fixture
def three_runs() -> dict[str, Any]:
    """Tenant A: pending (2 commands, a runner job), claimed, cancelled. Tenant B: one."""
    pending = make_run(project_id="p1", workspace_ref={"path": "/w/ONE"})
    make_command(pending, text="first")
    latest = make_command(pending, text="second")
    job = make_runner_job(pending, latest)
    claimed = claim_run(
        run_id=make_run(project_id="p2", backend_profile="codex").id, runner_id="r", lease_ms=60_000
    )
    cancelled = make_run(project_id="p1")
    cancel_run(run_id=cancelled.id, reason="stop")
    make_run(tenant_id="tenant-b", project_id="b-only", backend_profile="deepseek")
    return {"pending": pending, "claimed": claimed, "cancelled": cancelled, "job": job}


def _ids(client: APIClient, query: str) -> list[str]:
    response = client.get(f"{API}/runs?{query}")
    assert response.status_code == 200, response.json()
    return [item["id"] for item in response.json()["items"]]


def test_list_returns_items_with_latest_command_and_runner_job_total_and_facets(
    three_runs: dict[str, Any],
) -> None:
    body = key_client(role="client").get(f"{API}/runs").json()
    assert body["total"] == 3
    assert (body["page"], body["page_size"]) == (1, 50)
    item = next(i for i in body["items"] if i["id"] == three_runs["pending"].id)
    assert (item["latest_command"]["seq"], item["latest_command"]["state"]) == (2, "pending")
    assert item["latest_runner_job"]["id"] == three_runs["job"].id
    claimed = next(i for i in body["items"] if i["id"] == three_runs["claimed"].id)
    assert (claimed["latest_command"], claimed["latest_runner_job"]) == (None, None)
    facets = body["facets"]
    assert facets["projects"] == ["p1", "p2"]
    assert facets["backends"] == ["codex", "scripted"]
    assert facets["workspaces"] == ["/w/ONE", "/work/repo"]
    assert facets["status_counts"]["pending"] == 1
    assert facets["status_counts"]["claimed"] == 1
    assert facets["status_counts"]["cancelled"] == 1


def test_list_filters_by_repeatable_status_project_backend_and_search(
    three_runs: dict[str, Any],
) -> None:
    client = key_client(role="client")
    pending, claimed = three_runs["pending"].id, three_runs["claimed"].id
    assert set(_ids(client, "status=pending&status=claimed")) == {pending, claimed}
    assert _ids(client, "status=cancelled") == [three_runs["cancelled"].id]
    assert set(_ids(client, "project_id=p1")) == {pending, three_runs["cancelled"].id}
    assert _ids(client, "backend_profile=codex") == [claimed]
    assert _ids(client, "search=w/one") == [pending]
    assert _ids(client, f"search={claimed[-6:].lower()}") == [claimed]
    assert _ids(client, "search=STOP") == [three_runs["cancelled"].id]  # failure_message


def test_facets_cover_the_tenant_not_the_filtered_page(three_runs: dict[str, Any]) -> None:
    body = key_client(role="client").get(f"{API}/runs?status=claimed").json()
    assert body["total"] == 1
    assert sum(body["facets"]["status_counts"].values()) == 3
    assert "b-only" not in body["facets"]["projects"]


def _sorted_ids(sort: str, runs: list[Run]) -> list[str]:
    """The order SPEC's sort names promise, computed in Python from the stored rows."""
    if sort == "id-asc":
        return sorted(run.id for run in runs)
    newest_first = sorted(runs, key=lambda run: (run.updated_at, run.id), reverse=True)
    if sort == "updated-desc":
        return [run.id for run in newest_first]
    if sort == "updated-asc":
        return [run.id for run in reversed(newest_first)]
    return [run.id for run in sorted(newest_first, key=lambda run: run.status)]  # stable


@pytest.mark.parametrize("sort", ["updated-desc", "updated-asc", "status-asc", "id-asc"])
def test_list_sorts_by_each_whitelisted_order(three_runs: dict[str, Any], sort: str) -> None:
    expected = _sorted_ids(sort, list(Run.objects.filter(tenant_id="tenant-a")))
    assert _ids(key_client(role="client"), f"sort={sort}") == expected


def test_list_pages_with_page_and_page_size(three_runs: dict[str, Any]) -> None:
    client = key_client(role="client")
    everything = _ids(client, "sort=id-asc")
    pages = [_ids(client, f"sort=id-asc&page_size=2&page={page}") for page in (1, 2)]
    assert pages == [everything[:2], everything[2:]]
    body = client.get(f"{API}/runs?sort=id-asc&page_size=2&page=2").json()
    assert (body["total"], body["page"], body["page_size"]) == (3, 2, 2)


def test_list_with_no_matching_run_is_an_empty_page() -> None:
    make_run(project_id="p1")
    body = key_client(role="client").get(f"{API}/runs?project_id=none").json()
    assert (body["items"], body["total"]) == ([], 0)
    assert body["facets"]["projects"] == ["p1"]


def test_list_for_a_tenant_without_runs_is_an_empty_page() -> None:
    body = key_client(role="client", tenant_id="new-tenant").get(f"{API}/runs").json()
    assert (body["items"], body["total"], body["facets"]["projects"]) == ([], 0, [])


def test_list_runs_selector_is_four_bounded_queries_for_a_page(
    three_runs: dict[str, Any], django_assert_num_queries: Any
) -> None:
    """The page, the capped total, the windowed facets, whether the window was full
    (tests/security/test_run_list_cost.py pins that none of them reads the history)."""
    scope = selectors.runs_for(scope=Scope.of(key_of(key_client(role="client"))))
    with django_assert_num_queries(4):
        page = selectors.list_runs(
            scope=scope, filtered=scope, sort="updated-desc", page=1, page_size=50
        )
        latest = [(run.latest_command, run.latest_runner_job) for run in page.items]
    assert (page.total, len(latest), sorted(page.facets["projects"])) == (3, 3, ["p1", "p2"])


def test_list_endpoint_is_the_key_lookup_plus_four_queries(
    three_runs: dict[str, Any], django_assert_num_queries: Any
) -> None:
    client = key_client(role="client")
    with django_assert_num_queries(5):
        response = client.get(f"{API}/runs?status=pending&status=cancelled&search=p&sort=id-asc")
    assert response.json()["total"] == 2


# ---- the runner protocol --------------------------------------------------------------


def test_runner_protocol_from_register_to_a_completed_run() -> None:
    run = make_run()
    command_id = _post(key_client(role="client"), f"/runs/{run.id}/commands",
                       {"type": "turn", "payload": {"text": "do it"}}).json()["id"]  # fmt: skip
    runner = runner_for(run)
    token = {"runner_id": "runner-1", "lease_epoch": 1}

    registered = _post(runner, "/runners", {"id": "runner-1", "backend_profile": "scripted"})
    assert (registered.status_code, registered.json()["run_id"]) == (200, run.id)
    claimed = _post(runner, f"/runs/{run.id}/claim", {"runner_id": "runner-1", "lease_ms": 5000})
    assert claimed.status_code == 200, claimed.json()
    assert (claimed.json()["lease_epoch"], claimed.json()["status"]) == (1, "claimed")
    beat = _post(runner, f"/runs/{run.id}/heartbeat", {**token, "lease_ms": 60_000})
    assert beat.status_code == 200, beat.json()
    assert beat.json()["lease_expires_at"] > claimed.json()["lease_expires_at"]
    listed = runner.get(f"{API}/runs/{run.id}/commands").json()["items"]
    assert [(c["id"], c["state"]) for c in listed] == [(command_id, "pending")]

    acked = _post(runner, f"/commands/{command_id}/ack", token)
    assert (acked.status_code, acked.json()["state"]) == (200, "acknowledged")
    assert runner.get(f"{API}/runs/{run.id}").json()["status"] == "running"
    before = Event.objects.filter(run=run).count()
    batch = [{"type": "agent_message_delta", "payload": {"text": "d"}},
             {"type": "tool_call", "payload": {"name": "ls"}},
             {"type": "agent_message", "payload": {"text": "done"}}]  # fmt: skip
    appended = _post(runner, f"/runs/{run.id}/events", {**token, "events": batch})
    assert appended.status_code == 201, appended.json()
    assert [e["seq"] for e in appended.json()["items"]] == [before + 1, before + 2, before + 3]

    finished = _post(runner, f"/commands/{command_id}/finish",
                     {**token, "terminal_status": "completed"})  # fmt: skip
    assert (finished.status_code, finished.json()["state"]) == (200, "completed")
    result = {"terminal_status": "completed", "thread_id": "t1", "turn_id": "u1"}
    done = _post(runner, f"/runs/{run.id}/finish", {**token, **result})
    assert done.status_code == 200, done.json()
    assert (done.json()["status"], done.json()["claimed_by"]) == ("completed", None)
    last = Event.objects.filter(run=run).order_by("-seq").first()
    assert (last.type, last.payload["thread_id"]) == ("terminal_status", "t1")  # type: ignore[union-attr]


def test_second_claimer_gets_lease_conflict_while_the_lease_is_live() -> None:
    run, _, runner = claimed_run_with_command(runner_id="runner-1")
    second = _post(runner, f"/runs/{run.id}/claim", {"runner_id": "runner-2"})
    error = error_of(second, 409)
    assert (error["code"], error["failure_kind"]) == ("runner-lease-conflict",) * 2
    run.refresh_from_db()
    assert (run.claimed_by, run.lease_epoch) == ("runner-1", 1)


def test_heartbeat_with_a_stale_lease_epoch_is_refused_and_recorded() -> None:
    run, _, runner = claimed_run_with_command(runner_id="runner-1")
    # The same runner id claims again (a restarted process): epoch 1 is now a zombie's.
    assert (
        _post(runner, f"/runs/{run.id}/claim", {"runner_id": "runner-1"}).json()["lease_epoch"] == 2
    )
    stale = _post(runner, f"/runs/{run.id}/heartbeat", {"runner_id": "runner-1", "lease_epoch": 1})
    assert error_of(stale, 409)["code"] == "stale_lease"
    recorded = Event.objects.filter(run=run, type="backend_status").order_by("-seq").first()
    assert recorded is not None
    assert recorded.payload["phase"] == "late-write-rejected"
    assert (recorded.payload["source"], recorded.payload["refused_lease_epoch"]) == (
        "heartbeat",
        1,
    )


# ---- cancel ---------------------------------------------------------------------------


def test_cancel_returns_a_terminalized_receipt_the_runner_then_learns_of() -> None:
    run, command, runner = claimed_run_with_command()
    client = key_client(role="client")
    receipt = _post(client, f"/runs/{run.id}/cancel", {"reason": "user stop"})
    assert receipt.status_code == 200, receipt.json()
    body = receipt.json()
    assert (body["cancel_request"]["stage"], body["changed"]) == ("terminalized", True)
    assert (body["run"]["status"], body["run"]["cancel_reason"]) == ("cancelled", "user stop")

    listed = client.get(f"{API}/runs/{run.id}/cancel-requests").json()["items"]
    assert [(c["id"], c["stage"], c["epoch"]) for c in listed] == [
        (body["cancel_request"]["id"], "terminalized", 1)
    ]
    # The run's end revoked its runner key: that refusal is how the runner learns of it.
    beat = _post(runner, f"/runs/{run.id}/heartbeat", fencing(run))
    assert beat.status_code == 401, beat.json()
    late = _post(runner, f"/runs/{run.id}/events", {**fencing(run), "type": "agent_message"})
    assert late.status_code == 401, late.json()
    assert client.get(f"{API}/commands/{command.id}").json()["state"] == "cancelled"


def test_cancelling_a_command_returns_its_receipt() -> None:
    _, command, _ = claimed_run_with_command()
    receipt = _post(key_client(role="client"), f"/commands/{command.id}/cancel", {})
    assert receipt.status_code == 200, receipt.json()
    assert receipt.json()["command"]["state"] == "cancelled"
    assert receipt.json()["cancel_request"]["target_id"] == command.id
    assert receipt.json()["run"]["status"] == "claimed"


# ---- events ---------------------------------------------------------------------------


def test_events_page_count_and_events_of_one_command() -> None:
    run = make_run()
    first, second = make_command(run, text="one"), make_command(run, text="two")
    client = key_client(role="client")
    total = Event.objects.filter(run=run).count()

    page = client.get(f"{API}/runs/{run.id}/events?after_seq=1&limit=2").json()
    assert [e["seq"] for e in page["items"]] == [2, 3]
    assert (page["next_after_seq"], page["timed_out"]) == (3, False)
    count = client.get(f"{API}/runs/{run.id}/events/count?after_seq=2").json()
    assert count == {"count": total - 2}

    of_first = client.get(f"{API}/commands/{first.id}/events").json()["items"]
    assert {e["payload"].get("command_id") for e in of_first} == {first.id}
    assert [e["type"] for e in of_first] == ["user_message", "backend_status"]
    assert second.id not in str(of_first)


def test_long_poll_returns_at_once_when_an_event_exists_and_times_out_otherwise() -> None:
    run = make_run()
    make_command(run)
    client = key_client(role="client")
    ready = client.get(f"{API}/runs/{run.id}/events?after_seq=0&wait=30").json()
    assert (ready["count"] > 0, ready["timed_out"]) == (True, False)
    last = ready["next_after_seq"]
    idle = client.get(f"{API}/runs/{run.id}/events?after_seq={last}&wait=0.2").json()
    assert (idle["items"], idle["timed_out"], idle["next_after_seq"]) == ([], True, last)


# ---- runner jobs ----------------------------------------------------------------------


def test_runner_jobs_are_idempotent_and_patches_merge_the_result() -> None:
    run, command, runner = claimed_run_with_command()
    body = runner_job_body(command.id, idempotency_key="launch-1", result={"phase": "created"})
    created = _post(runner, f"/runs/{run.id}/runner-jobs", body)
    assert created.status_code == 201, created.json()
    job_id = created.json()["id"]
    replayed = _post(runner, f"/runs/{run.id}/runner-jobs", body)
    assert (replayed.status_code, replayed.json()["id"]) == (200, job_id)
    mismatch = _post(runner, f"/runs/{run.id}/runner-jobs", {**body, "image": "other:2"})
    assert error_of(mismatch, 409)["code"] == "idempotency_mismatch"

    patch = runner.patch(f"{API}/runner-jobs/{job_id}", {"result": {"exit": 0}}, format="json")
    assert patch.status_code == 200, patch.json()
    assert patch.json()["result"] == {"phase": "created", "exit": 0}
    listed = runner.get(f"{API}/runs/{run.id}/runner-jobs").json()["items"]
    assert [(j["id"], j["result"]["exit"]) for j in listed] == [(job_id, 0)]


# ---- backends, health, schema ---------------------------------------------------------


def test_backends_lists_the_seeded_profiles_with_capabilities_capacity_and_health() -> None:
    items = key_client(role="client").get(f"{API}/backends").json()["items"]
    assert {b["profile"] for b in items} == SEEDED_PROFILES
    for backend in items:
        assert backend["capacity"]["max_concurrent_runs"] > 0
        assert backend["capabilities"]["protocol"]
        assert backend["health"]["status"] == "registered"


def test_healthz_and_readyz_answer_without_a_key() -> None:
    assert Client().get("/healthz").json() == {"status": "ok"}
    # No worker or beat has a heartbeat yet: not ready, each check reported.
    waiting = Client().get("/readyz")
    assert waiting.status_code == 503
    assert waiting.json()["error"]["details"]["failed"] == ["beat", "worker"]
    now = timezone.now()
    for name in (ProcessKind.WORKER, ProcessKind.BEAT):
        ProcessHeartbeat.objects.create(
            name=name, hostname="test", pid=1, started_at=now, beat_at=now
        )
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    checks = ready.json()["checks"]
    assert {name for name, check in checks.items() if check["ok"]} == {
        "database",
        "migrations",
        "worker",
        "beat",
    }


def test_schema_is_an_openapi_3_document_of_the_runs_api() -> None:
    response = Client().get("/api/schema?format=json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = ["/runs", "/runs/{id}", "/runs/{id}/events", "/runs/{id}/claim", "/commands/{id}/ack"]
    for path in paths:
        assert f"/api/v1{path}" in document["paths"], sorted(document["paths"])


@pytest.mark.django_db(transaction=True)
def test_a_runner_write_reads_its_run_only_under_the_lock() -> None:
    """A runner key names its run: the append's only read of the run row is the service's
    `FOR UPDATE`, not a scope check before it. Another run stays a 404."""
    run, _, runner = claimed_run_with_command()
    body = {**fencing(run), "events": [{"type": "agent_message_delta", "payload": {"text": "hi"}}]}
    with CaptureQueriesContext(connection) as queries:
        response = call(runner, "POST", f"/runs/{run.id}/events", body)
    assert response.status_code == 201, response.json()
    # The lock is the service's statement as it is, or prepared (`prepared_sql.execute_hot`).
    run_reads = [
        q["sql"]
        for q in queries.captured_queries
        if 'FROM "agentrun_runs"' in q["sql"] or "EXECUTE run_lock" in q["sql"]
    ]
    assert len(run_reads) == 1, run_reads
    assert run_reads[0].endswith("FOR UPDATE") or "EXECUTE run_lock" in run_reads[0], run_reads
    other = make_claimed_run(runner_id="runner-1")
    error = error_of(call(runner, "POST", f"/runs/{other.id}/events", fencing(other)), 404)
    assert error["code"] == "not_found"
