"""Retry of a failed or blocked task: reserve (dry run, replay, key conflicts), activate,
record failure — and the attempt history the API shows."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from agentrun.tenancy import Scope
from queues.models import QueueAttempt, QueueTask
from queues.services.attempt_retries import reserve_retry
from runs.models import Backend, Run
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.queues.helpers import attempts, call, file_task, finish, run_of, schedule, task
from tests.runs.threads import race


def _failed_task(status: str = "failed") -> QueueTask:
    filed = file_task()
    schedule()
    finish(run_of(filed.id), status=status, failure_kind="backend-failed", failure_message="boom")
    return task(filed.id)


def _reserve(api: APIClient, task_id: str, key: str = "r-1", **body: Any) -> Any:
    return call(
        api,
        "POST",
        f"/queue/tasks/{task_id}/retry",
        {"idempotency_key": key, "reason": "flaky", **body},
    )


@pytest.mark.django_db
def test_reserve_activate_run_complete_with_history_in_retry_order() -> None:
    api = key_client(role="client")
    failed = _failed_task()
    reserved = _reserve(api, failed.id)
    assert reserved.status_code == 201, reserved.json()
    body = reserved.json()
    first = attempts(failed.id)[0]
    assert (body["created"], body["retry_index"]) == (True, 1)
    assert body["attempt"]["state"] == "reserved"
    assert body["attempt"]["previous_attempt_id"] == first.attempt_id
    assert not Run.objects.filter(pk=body["attempt"]["run_id"]).exists()  # reserved, not made

    path = f"/queue/tasks/{failed.id}/attempts/{body['attempt']['attempt_id']}/activate"
    activated = call(api, "POST", path).json()
    assert activated["activated"] is True and activated["task"]["state"] == "running"
    run = Run.objects.get(pk=body["attempt"]["run_id"])  # the reserved run id, now a run
    assert run.trace_sink == {"task_id": failed.id, "lane": "default"}
    assert activated["attempt"]["command_id"] == run.commands.get().id
    assert call(api, "POST", path).json()["activated"] is False  # a replay makes nothing
    assert Run.objects.filter(trace_sink__task_id=failed.id).count() == 2

    finish(run)
    history = call(api, "GET", f"/queue/tasks/{failed.id}/attempts").json()
    assert [(a["retry_index"], a["state"]) for a in history["items"]] == [
        (1, "completed"),
        (0, "failed"),
    ]  # newest first, as the seed's listQueueAttempts
    assert task(failed.id).state == "completed"
    assert task(failed.id).latest_attempt["attempt_id"] == body["attempt"]["attempt_id"]


@pytest.mark.django_db
def test_a_dry_run_answers_the_next_retry_index_and_writes_nothing() -> None:
    failed = _failed_task("blocked")
    response = _reserve(key_client(role="client"), failed.id, dry_run=True)
    assert response.status_code == 200
    assert (response.json()["dry_run"], response.json()["retry_index"]) == (True, 1)
    assert response.json()["attempt"] is None and len(attempts(failed.id)) == 1


@pytest.mark.django_db
def test_the_same_key_replays_and_another_reason_for_it_is_a_conflict() -> None:
    api = key_client(role="client")
    failed = _failed_task()
    first = _reserve(api, failed.id).json()
    again = _reserve(api, failed.id)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["attempt"]["attempt_id"] == first["attempt"]["attempt_id"]
    error = error_of(_reserve(api, failed.id, reason="another reason"), 409)
    assert error["code"] == "idempotency_mismatch"
    assert len(attempts(failed.id)) == 2


@pytest.mark.django_db
def test_a_reserve_while_an_attempt_is_active_is_a_conflict() -> None:
    api = key_client(role="client")
    failed = _failed_task()
    _reserve(api, failed.id, key="r-1")
    error = error_of(_reserve(api, failed.id, key="r-2"), 409)
    assert (error["code"], error["details"]["attempt_state"]) == ("attempt_active", "reserved")

    running = file_task(title="running")
    schedule()
    error = error_of(_reserve(api, running.id), 409)
    assert (error["code"], error["details"]["attempt_state"]) == ("attempt_active", "running")


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["pending", "completed", "cancelled"])
def test_only_failed_or_blocked_tasks_are_retried(state: str) -> None:
    filed = file_task()
    if state != "pending":
        schedule()
        if state == "completed":
            finish(run_of(filed.id))
        else:
            call(key_client(role="client"), "POST", f"/queue/tasks/{filed.id}/cancel")
    error = error_of(_reserve(key_client(role="client"), filed.id), 409)
    assert (error["code"], error["details"]["state"]) == ("task_not_retryable", state)


@pytest.mark.django_db(transaction=True)
def test_concurrent_reserves_with_one_key_make_one_attempt() -> None:
    failed = _failed_task()

    def reserve() -> Any:
        return reserve_retry(
            task_id=failed.id,
            scope=Scope.tenant("tenant-a"),
            idempotency_key="r-same",
            reason="flaky",
            dry_run=False,
        )

    results = race([reserve for _ in range(8)])
    assert not [r for r in results if isinstance(r, Exception)], results
    assert len({r.attempt.attempt_id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert QueueAttempt.objects.filter(task_id=failed.id, state="reserved").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_reserves_with_different_keys_leave_one_active_attempt() -> None:
    failed = _failed_task()

    def reserve(n: int) -> Any:
        return lambda: reserve_retry(
            task_id=failed.id,
            scope=Scope.tenant("tenant-a"),
            idempotency_key=f"r-{n}",
            reason="flaky",
            dry_run=False,
        )

    results = race([reserve(n) for n in range(6)])
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1
    assert {r.code for r in results if isinstance(r, Exception)} == {"attempt_active"}
    assert [a.retry_index for a in attempts(failed.id)] == [0, 1]


@pytest.mark.django_db
def test_a_failed_activation_is_recorded_and_the_attempt_stays_reserved() -> None:
    api = key_client(role="client")
    failed = _failed_task()
    attempt = _reserve(api, failed.id).json()["attempt"]
    path = f"/queue/tasks/{failed.id}/attempts/{attempt['attempt_id']}"
    profile = Backend.objects.filter(profile="scripted").values().get()
    Backend.objects.filter(profile="scripted").delete()

    error = error_of(call(api, "POST", f"{path}/activate"), 400)
    assert error["details"]["field"] == "backend_profile"
    stored = attempts(failed.id)[1]
    assert (stored.state, stored.failure_kind) == ("reserved", "schema-invalid")
    assert "unknown backend profile" in (stored.failure_message or "")

    recorded = call(
        api,
        "POST",
        f"{path}/failure",
        {"failure_kind": "infra-failed", "failure_message": "no capacity"},
    ).json()
    assert (recorded["state"], recorded["failure_kind"]) == ("reserved", "infra-failed")

    Backend.objects.create(**profile)
    activated = call(api, "POST", f"{path}/activate").json()
    assert activated["activated"] is True and activated["attempt"]["failure_kind"] is None
    unchanged = call(
        api, "POST", f"{path}/failure", {"failure_kind": "infra-failed", "failure_message": "late"}
    ).json()
    assert (unchanged["state"], unchanged["failure_message"]) == ("running", None)


@pytest.mark.django_db
def test_another_tenants_task_cannot_be_retried() -> None:
    failed = _failed_task()
    error = error_of(_reserve(key_client(role="client", tenant_id="tenant-b"), failed.id), 404)
    assert error["code"] == "not_found"
