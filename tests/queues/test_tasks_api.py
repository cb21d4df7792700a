"""The task endpoints: create (idempotent), list by priority with page numbers, get,
cancel (cascading to the run), read cursors, the tenant and role matrix."""

from __future__ import annotations

from typing import Any

import pytest
from pytest_django import DjangoAssertNumQueries

from dispatch.models import RunnerDispatchIntent
from queues.models import QueueTask
from runs.control_models import CancelRequest
from runs.models import Run
from tests.api.helpers import error_of
from tests.builders import api_client, key_client
from tests.queues.helpers import attempts, call, file_task, run_of, schedule, task, task_body

pytestmark = pytest.mark.django_db


def test_create_files_a_pending_task_and_a_replay_returns_it() -> None:
    api = key_client(role="client")
    created = call(api, "POST", "/queue/tasks", task_body(idempotency_key="k-1"))
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["state"], body["tenant_id"], body["priority"], body["latest_attempt"]) == (
        "pending",
        "tenant-a",
        5,
        None,
    )
    again = call(api, "POST", "/queue/tasks", task_body(idempotency_key="k-1"))
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert again.json()["version"] == body["version"]
    error = error_of(
        call(api, "POST", "/queue/tasks", task_body(idempotency_key="k-1", priority=6)), 409
    )
    assert (error["code"], error["details"]["task_id"]) == ("idempotency_mismatch", body["id"])
    assert QueueTask.objects.count() == 1


def test_an_operator_files_for_a_named_tenant() -> None:
    operator = key_client(role="operator", tenant_id="ops")
    error = error_of(call(operator, "POST", "/queue/tasks", task_body()), 400)
    assert error["details"]["field"] == "tenant_id"
    created = call(operator, "POST", "/queue/tasks", task_body(tenant_id="tenant-b")).json()
    assert created["tenant_id"] == "tenant-b"


def test_keys_without_rights_are_refused_and_other_tenants_tasks_are_404() -> None:
    mine = file_task()
    assert call(api_client(None), "GET", "/queue/tasks").status_code == 401
    runner = key_client(role="runner", run_id="run_x")
    assert error_of(call(runner, "GET", "/queue/tasks"), 403)["code"] == "forbidden"
    theirs = key_client(role="client", tenant_id="tenant-b")
    bodies = {
        "read": {"reader_id": "me"},
        "retry": {"idempotency_key": "k", "reason": "r"},
        "failure": {"failure_kind": "timeout", "failure_message": "m"},
    }
    for method, path in [
        ("GET", f"/queue/tasks/{mine.id}"),
        ("POST", f"/queue/tasks/{mine.id}/cancel"),
        ("POST", f"/queue/tasks/{mine.id}/read"),
        ("GET", f"/queue/tasks/{mine.id}/attempts"),
        ("POST", f"/queue/tasks/{mine.id}/retry"),
        ("POST", f"/queue/tasks/{mine.id}/attempts/qa_x/activate"),
        ("POST", f"/queue/tasks/{mine.id}/attempts/qa_x/failure"),
        ("GET", "/queue/tasks/qt_nope"),
    ]:
        body = bodies.get(path.rsplit("/", 1)[-1])
        assert error_of(call(theirs, method, path, body), 404)["code"] == "not_found", path
    assert call(theirs, "GET", "/queue/tasks").json()["total"] == 0
    assert call(theirs, "GET", "/queue/commander").json()["items"] == []
    assert call(runner, "GET", "/queue/stats").status_code == 403
    assert task(mine.id).state == "pending"


def test_the_backlog_lists_by_priority_then_age_with_page_numbers(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    low = file_task(title="low", priority=1)
    high = file_task(title="high", priority=9)
    mid_old = file_task(title="mid old", priority=5)
    mid_new = file_task(title="mid new", priority=5)
    file_task(title="other queue", queue="nightly", priority=99)
    file_task(title="other lane", lane="docs", priority=99)
    api = key_client(role="client")
    path = "/queue/tasks?queue=default&lane=default&state=pending&page_size=3"
    with django_assert_num_queries(3):  # the key, the count, the page
        first = call(api, "GET", path).json()
    assert [i["id"] for i in first["items"]] == [high.id, mid_old.id, mid_new.id]
    assert (first["total"], first["page"], first["page_size"]) == (4, 1, 3)
    second = call(api, "GET", f"{path}&page=2").json()
    assert [i["id"] for i in second["items"]] == [low.id]
    assert call(api, "GET", "/queue/tasks?state=running").json()["total"] == 0


def test_get_with_a_reader_says_unread_until_marked_and_again_after_a_change() -> None:
    filed = file_task()
    api = key_client(role="client")
    assert call(api, "GET", f"/queue/tasks/{filed.id}?reader_id=ann").json()["unread"] is True
    cursor = call(api, "POST", f"/queue/tasks/{filed.id}/read", {"reader_id": "ann"}).json()
    assert (cursor["task_id"], cursor["task_version"]) == (filed.id, filed.version)
    assert call(api, "GET", f"/queue/tasks/{filed.id}?reader_id=ann").json()["unread"] is False
    assert call(api, "GET", f"/queue/tasks/{filed.id}").json()["unread"] is None
    schedule()
    assert call(api, "GET", f"/queue/tasks/{filed.id}?reader_id=ann").json()["unread"] is True


def test_cancelling_a_pending_task_cancels_it_once() -> None:
    filed = file_task()
    api = key_client(role="client")
    first = call(api, "POST", f"/queue/tasks/{filed.id}/cancel", {"reason": "dup"}).json()
    assert first["changed"] is True and first["task"]["state"] == "cancelled"
    assert first["task"]["cancel_reason"] == "dup" and first["task"]["cancelled_at"]
    again = call(api, "POST", f"/queue/tasks/{filed.id}/cancel").json()
    assert again["changed"] is False and again["task"]["version"] == first["task"]["version"]
    assert schedule().started == []


def test_cancelling_a_running_task_cancels_its_run_and_attempt() -> None:
    filed = file_task()
    schedule()
    run = run_of(filed.id)
    body = call(
        key_client(role="client"),
        "POST",
        f"/queue/tasks/{filed.id}/cancel",
        {"reason": "wrong repo"},
    ).json()
    assert body["changed"] is True and body["task"]["state"] == "cancelled"
    assert Run.objects.get(pk=run.id).status == "cancelled"
    assert CancelRequest.objects.get(run=run).stage == "terminalized"
    [attempt] = attempts(filed.id)
    assert (attempt.state, attempt.failure_message) == ("cancelled", "wrong repo")
    assert task(filed.id).cancel_reason == "wrong repo"


@pytest.mark.parametrize(("dispatch", "intents"), [({}, 1), (None, 0), ("absent", 1)])
def test_a_task_dispatches_a_runner_unless_it_says_dispatch_null(
    dispatch: Any, intents: int
) -> None:
    body = task_body()
    if dispatch == "absent":
        body.pop("dispatch")
    else:
        body["dispatch"] = dispatch
    created = call(key_client(role="client"), "POST", "/queue/tasks", body).json()
    schedule()
    run = run_of(created["id"])
    assert RunnerDispatchIntent.objects.filter(run=run).count() == intents
    if intents:
        planned = RunnerDispatchIntent.objects.get(run=run).runner_job_id
        assert task(created["id"]).latest_attempt["runner_job_id"] == planned
