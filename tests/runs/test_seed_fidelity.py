"""Seed fidelity of the runs API and services (issue 17 items 1, 4, 5, 7, 8): each test
pins what the seed's store did and this rewrite had dropped."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from runs.control_models import CancelRequest
from runs.models import Command, Event, RunnerJob
from runs.services.cancellation import cancel_run
from runs.services.command_lifecycle import ack_command
from runs.services.runners import RunnerJobSpec, save_runner_job
from tests.api.helpers import (
    call,
    error_of,
    make_command,
    make_runner_job,
    run_body,
    runner_job_body,
)
from tests.builders import key_client, make_claimed_run, make_run

pytestmark = pytest.mark.django_db


# ---- item 1: workspace_ref is any bounded JSON object with a path ------------------------


def test_a_run_keeps_every_key_of_its_workspace_ref() -> None:
    ref = {"path": "/work/repo", "branch": "main", "repo": {"url": "https://x/y.git"}}
    response = call(key_client(role="client"), "POST", "/runs", run_body(workspace_ref=ref))
    assert response.status_code == 201, response.json()
    assert response.json()["workspace_ref"] == ref


@pytest.mark.parametrize(
    ("ref", "named"),
    [
        ({"branch": "main"}, "path"),
        ({"path": ""}, "path"),
        ({"path": 7}, "path"),
        ({"path": "/w", "blob": "z" * 70_000}, "workspace_ref"),
    ],
)
def test_a_workspace_ref_without_a_path_or_over_its_bound_is_a_400(
    ref: dict[str, Any], named: str
) -> None:
    response = call(key_client(role="client"), "POST", "/runs", run_body(workspace_ref=ref))
    assert named in error_of(response, 400)["message"]


# ---- item 4: the run list's search and latest command / runner job ----------------------


def _search(text: str) -> list[str]:
    body = call(key_client(role="client"), "GET", f"/runs?search={text}").json()
    return [item["id"] for item in body["items"]]


def test_search_matches_the_session_title_and_the_lane_as_the_seed_did() -> None:
    titled = make_run(session_ref={"session_id": "s-fid", "metadata": {"title": "Parser Rework"}})
    laned = make_run(trace_sink={"task_id": "qt_fidelity", "lane": "nightly-lane"})
    make_run()
    assert _search("parser%20rework") == [titled.id]
    assert _search("nightly-lane") == [laned.id]


def test_the_latest_command_and_runner_job_carry_every_column() -> None:
    run = make_claimed_run()
    command = make_command(run, text="look")
    ack_command(command_id=command.id, runner_id="runner-1", lease_epoch=run.lease_epoch)
    job = make_runner_job(run, command, idempotency_key="k-1")
    item = call(key_client(role="client"), "GET", "/runs").json()["items"][0]
    latest = item["latest_command"]
    stored = Command.objects.get(pk=command.id)
    assert latest["payload"] == {"text": "look"}
    assert latest["payload_hash"] == stored.payload_hash
    assert latest["acknowledged_at"] is not None and latest["run_id"] == run.id
    assert {"cancel_epoch", "cancel_request_id", "cancel_requested_at", "cancel_reason"} <= set(
        latest
    )
    latest_job = item["latest_runner_job"]
    assert latest_job["manager_url"] == "http://manager.local"
    assert latest_job["source_commit"] == "abc123"
    assert latest_job["attempt_id"] == "attempt-1"
    assert latest_job["payload_hash"] == job.payload_hash
    assert latest_job["idempotency_key"] == "k-1" and latest_job["updated_at"]


# ---- item 5: a cancel's terminal_status names its cancel request -------------------------


def test_a_cancels_terminal_status_event_carries_the_cancel_request_and_epoch() -> None:
    run = make_claimed_run()
    make_command(run)
    cancel_run(run_id=run.id, reason="stop it")
    request = CancelRequest.objects.get(run=run)
    terminal = Event.objects.get(run=run, type="terminal_status")
    assert terminal.payload["cancel_request_id"] == request.id
    assert terminal.payload["cancel_epoch"] == request.epoch == 1


# ---- item 7: caller-supplied runner job id and payload hash; lookup by key ---------------


def test_a_runner_job_takes_the_callers_id_and_payload_hash() -> None:
    run = make_run()
    command = make_command(run)
    api = key_client(role="operator")
    body = runner_job_body(
        command.id, id="rjob_caller_1", payload_hash="sha256:mine", idempotency_key="k-7"
    )
    created = call(api, "POST", f"/runs/{run.id}/runner-jobs", body)
    assert created.status_code == 201, created.json()
    saved = created.json()
    assert (saved["id"], saved["payload_hash"]) == ("rjob_caller_1", "sha256:mine")
    assert call(api, "POST", f"/runs/{run.id}/runner-jobs", body).status_code == 200  # replay
    other = {**body, "payload_hash": "sha256:other"}
    assert error_of(call(api, "POST", f"/runs/{run.id}/runner-jobs", other), 409)
    taken = {**body, "idempotency_key": "k-8"}
    error = error_of(call(api, "POST", f"/runs/{run.id}/runner-jobs", taken), 409)
    assert error["code"] == "runner_job_id_taken"
    assert RunnerJob.objects.filter(run=run).count() == 1


def test_a_runner_job_is_found_by_its_idempotency_key_and_checked_by_hash() -> None:
    run = make_run()
    command = make_command(run)
    spec = RunnerJobSpec(**runner_job_body(command.id))
    job = save_runner_job(run_id=run.id, spec=spec, idempotency_key="k-9").job
    make_runner_job(run, command, idempotency_key="k-10")
    api = key_client(role="operator")
    found = call(api, "GET", f"/runs/{run.id}/runner-jobs?idempotency_key=k-9").json()
    assert [item["id"] for item in found["items"]] == [job.id]
    same = f"/runs/{run.id}/runner-jobs?idempotency_key=k-9&payload_hash={job.payload_hash}"
    assert len(call(api, "GET", same).json()["items"]) == 1
    wrong = f"/runs/{run.id}/runner-jobs?idempotency_key=k-9&payload_hash=sha256:nope"
    assert error_of(call(api, "GET", wrong), 409)["code"] == "idempotency_mismatch"
    none = call(api, "GET", f"/runs/{run.id}/runner-jobs?idempotency_key=k-none").json()
    assert none["items"] == []


# ---- item 8: a run's command list is capped at the seed's 100, and says so ---------------


def test_the_command_list_takes_at_most_100_and_the_openapi_document_says_so() -> None:
    run = make_run()
    api = key_client(role="client")
    assert call(api, "GET", f"/runs/{run.id}/commands?limit=100").status_code == 200
    error = error_of(call(api, "GET", f"/runs/{run.id}/commands?limit=101"), 400)
    assert "limit" in error["message"]
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = schema["paths"]["/api/v1/runs/{id}/commands"]["get"]
    limit = next(p for p in operation["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 100)
    events = schema["paths"]["/api/v1/runs/{id}/events"]["get"]
    assert next(p for p in events["parameters"] if p["name"] == "limit")["schema"]["maximum"] == 500
