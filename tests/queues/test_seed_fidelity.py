"""Seed fidelity of the work queue (issue 17 items 1, 2, 3, 6, 7): each test pins what the
seed's store did and this rewrite had dropped."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.services.launch import dispatch_batch
from queues.models import QueueAttempt
from runs.models import Backend, RunnerJob
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.dispatch.helpers import RecordingLauncher
from tests.queues.helpers import call, file_task, finish, run_of, schedule, task, task_body


def _post_task(**overrides: Any) -> Any:
    return call(key_client(role="client"), "POST", "/queue/tasks", task_body(**overrides))


# ---- items 1 and 2: what the seed's schema allows a task to carry ------------------------


@pytest.mark.django_db
def test_a_task_keeps_extra_workspace_keys() -> None:
    ref = {"path": "/work/repo", "branch": "release/2.0"}
    response = _post_task(workspace_ref=ref)
    assert response.status_code == 201, response.json()
    assert response.json()["workspace_ref"] == ref


@pytest.mark.django_db
def test_a_task_without_provider_or_workspace_with_null_policy_and_negative_priority() -> None:
    body = task_body(priority=-5, execution_policy=None)
    del body["provider_id"], body["workspace_ref"]
    response = call(key_client(role="client"), "POST", "/queue/tasks", body)
    assert response.status_code == 201, response.json()
    filed = response.json()
    assert (filed["provider_id"], filed["workspace_ref"], filed["execution_policy"]) == (
        None,
        None,
        None,
    )
    assert filed["priority"] == -5
    higher = file_task(priority=0, title="default priority goes first")
    assert schedule(limit=1).started == [higher.id]  # -5 sorts below the default 0
    assert schedule().started == [filed["id"]]
    run = run_of(filed["id"])
    # No provider named: the backend profile's default (the seed's naming, or the operator's).
    assert run.provider_id == "agentrun-v01-provider-scripted"
    assert run.workspace_ref == {}


@pytest.mark.django_db
def test_a_profiles_operator_set_default_provider_is_what_a_providerless_task_gets() -> None:
    backend = Backend.objects.get(profile="scripted")
    backend.capabilities = {**backend.capabilities, "default_provider_id": "house-provider"}
    backend.save(update_fields=["capabilities"])
    filed = file_task(provider_id=None)
    schedule()
    assert run_of(filed.id).provider_id == "house-provider"


# ---- item 3: attempt history newest first, paged by the seed's cursor --------------------


def _attempt_history(task_id: str, retries: int) -> None:
    """`retries` failed retries after the first failed run (real reserve and activate)."""
    api = key_client(role="client")
    for index in range(retries):
        reserved = call(
            api,
            "POST",
            f"/queue/tasks/{task_id}/retry",
            {"idempotency_key": f"r-{index}", "reason": "again"},
        ).json()
        attempt_id = reserved["attempt"]["attempt_id"]
        call(api, "POST", f"/queue/tasks/{task_id}/attempts/{attempt_id}/activate")
        finish(run_of(task_id), status="failed", failure_kind="backend-failed")


@pytest.mark.django_db
def test_attempts_come_newest_first_and_page_by_retry_index_cursor() -> None:
    filed = file_task()
    schedule()
    finish(run_of(filed.id), status="failed", failure_kind="backend-failed")
    _attempt_history(filed.id, retries=2)
    api = key_client(role="client")
    first = call(api, "GET", f"/queue/tasks/{filed.id}/attempts?limit=2").json()
    assert [a["retry_index"] for a in first["items"]] == [2, 1]
    assert first["cursor"] == "1"
    second = call(api, "GET", f"/queue/tasks/{filed.id}/attempts?limit=2&cursor=1").json()
    assert [a["retry_index"] for a in second["items"]] == [0]
    assert second["cursor"] is None  # a short page is the last
    oldest = call(api, "GET", f"/queue/tasks/{filed.id}/attempts?after_retry_index=-1").json()
    assert [a["retry_index"] for a in oldest["items"]] == [0, 1, 2]


# ---- item 6: the attempt's runner job id is the saved job's id ---------------------------


@pytest.mark.django_db(transaction=True)
def test_a_task_attempts_runner_job_id_names_the_saved_job() -> None:
    filed = file_task(dispatch={})
    schedule()
    planned = task(filed.id).latest_attempt["runner_job_id"]
    assert planned is not None
    counts = dispatch_batch(owner="w", launchers={"local": RecordingLauncher()})
    assert counts.dispatched == 1
    job = RunnerJob.objects.get(run_id=task(filed.id).latest_attempt["run_id"])
    assert job.id == planned  # one id: the attempt's, the intent's and the job's
    patched = call(
        key_client(role="operator"), "PATCH", f"/runner-jobs/{planned}", {"result": {"seen": 1}}
    )
    assert patched.status_code == 200, patched.json()
    assert patched.json()["result"]["seen"] == 1


# ---- item 7: pushing a task's attempt projection (seed `updateQueueTaskAttempt`) ---------


def _push(task_id: str, body: dict[str, Any], *, role: str = "operator") -> Any:
    return call(key_client(role=role), "PUT", f"/queue/tasks/{task_id}/attempt", body)


@pytest.mark.django_db
def test_an_operator_pushes_a_tasks_attempt_projection() -> None:
    filed = file_task()
    before = filed.version
    running = {"attempt_id": "qa_external_1", "state": "running", "run_id": "run_elsewhere"}
    response = _push(filed.id, {"state": "running", "latest_attempt": running})
    assert response.status_code == 200, response.json()
    pushed = response.json()
    assert pushed["state"] == "running" and pushed["version"] > before
    assert pushed["latest_attempt"]["attempt_id"] == "qa_external_1"
    attempt = QueueAttempt.objects.get(task_id=filed.id, attempt_id="qa_external_1")
    assert (attempt.retry_index, attempt.state, attempt.run_id) == (0, "running", "run_elsewhere")

    done = {**running, "state": "failed", "failure_kind": "backend-failed", "failure_message": "x"}
    assert _push(filed.id, {"state": "failed", "latest_attempt": done}).status_code == 200
    attempt.refresh_from_db()
    assert (attempt.state, attempt.failure_kind, attempt.terminal_at is not None) == (
        "failed",
        "backend-failed",
        True,
    )
    # The task is terminal now: a later push is refused, nothing changes.
    again = _push(filed.id, {"state": "running", "latest_attempt": running})
    assert error_of(again, 409)["code"] == "task_terminal"


@pytest.mark.django_db
def test_a_terminal_attempt_reported_differently_is_a_409_and_a_client_may_not_push() -> None:
    filed = file_task()
    schedule()
    finish(run_of(filed.id), status="blocked")
    attempt = QueueAttempt.objects.get(task_id=filed.id)
    QueueAttempt.objects.filter(task_id=filed.id).update(state="completed")  # task still live
    task_row = task(filed.id)
    task_row.state = "running"
    task_row.save(update_fields=["state"])
    changed = {"attempt_id": attempt.attempt_id, "state": "failed"}
    error = error_of(_push(filed.id, {"state": "failed", "latest_attempt": changed}), 409)
    assert error["code"] == "attempt_immutable"
    refused = _push(filed.id, {"state": "failed", "latest_attempt": changed}, role="client")
    assert refused.status_code == 403
