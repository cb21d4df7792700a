"""Bad input of any kind is a 400 naming the field, and never writes anything (SPEC §3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from agentrun.validation import KIB, MIB
from runs.control_models import CancelRequest
from runs.models import Command, Event, Run, Runner, RunnerJob
from tests.api.helpers import (
    API,
    call,
    claimed_run_with_command,
    error_of,
    event_count,
    make_runner_job,
)
from tests.builders import key_client

pytestmark = pytest.mark.django_db

LONG_ID = "x" * 201
FENCE = {"runner_id": "runner-1", "lease_epoch": 1}
BIG_EVENT_PAYLOAD = {"blob": "x" * (MIB + 1)}
BIG_COMMAND_PAYLOAD = {"text": "x" * (256 * KIB + 1)}
FINISH = {**FENCE, "terminal_status": "completed"}
RUN = {
    "project_id": "p",
    "workspace_ref": {"path": "/w"},
    "provider_id": "openai",
    "backend_profile": "scripted",
}
JOB = {
    "command_id": "{command}",
    "attempt_id": "a",
    "runner_id": "runner-1",
    "namespace": "ns",
    "job_name": "job",
    "manager_url": "http://m",
    "image": "img",
    "source_commit": "c",
}


@dataclass
class World:
    run: Run
    command: Command
    job: RunnerJob
    runner: APIClient
    client: APIClient

    def key(self, who: str) -> APIClient:
        return self.runner if who == "runner" else self.client

    def path(self, template: str) -> str:
        return template.format(run=self.run.id, command=self.command.id, job=self.job.id)

    def fill(self, body: Any) -> Any:
        """Put the world's ids into a body that names them (`{command}`)."""
        if isinstance(body, dict):
            return {key: self.fill(value) for key, value in body.items()}
        return self.path(body) if isinstance(body, str) and "{" in body else body

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a write could change."""
        counts = tuple(
            model.objects.count()
            for model in (Run, Command, Event, RunnerJob, Runner, CancelRequest)
        )
        run = Run.objects.get(pk=self.run.pk)
        command = Command.objects.get(pk=self.command.pk)
        job = RunnerJob.objects.get(pk=self.job.pk)
        return (*counts, run.status, run.claimed_by, run.lease_epoch, run.lease_expires_at,
                command.state, job.result)  # fmt: skip


@pytest.fixture
def world() -> World:
    run, command, runner = claimed_run_with_command()
    job = make_runner_job(run, command)
    client = key_client(role="client", tenant_id=run.tenant_id)
    return World(run, command, job, runner, client)


def _assert_invalid_naming(response: Any, field: str) -> None:
    error = error_of(response, 400)
    assert error["code"] == "invalid"
    assert field in error["message"], error


# (who, method, path, body, the field the message must name)
BAD_BODIES = [
    # POST /runs
    ("client", "POST", "/runs", {**RUN, "project_id": {"a": 1}}, "project_id"),
    ("client", "POST", "/runs", {**RUN, "workspace_ref": "/w"}, "workspace_ref"),
    ("client", "POST", "/runs", {**RUN, "workspace_ref": {"x": 1}}, "path"),
    ("client", "POST", "/runs", {**RUN, "colour": "red"}, "colour"),
    ("client", "POST", "/runs", {**RUN, "id": LONG_ID}, "id"),
    ("client", "POST", "/runs", {**RUN, "project_id": LONG_ID}, "project_id"),
    ("client", "POST", "/runs", {**RUN, "execution_policy": [1]}, "execution_policy"),
    ("client", "POST", "/runs", {**RUN, "execution_policy": {"k": "x" * 70_000}},
     "execution_policy"),
    ("client", "POST", "/runs", {**RUN, "session_ref": {"session_id": LONG_ID}}, "session_id"),
    ("client", "POST", "/runs", {**RUN, "backend_profile": "nope"}, "backend_profile"),
    ("client", "POST", "/runs", {k: v for k, v in RUN.items() if k != "provider_id"},
     "provider_id"),
    # POST /runs/{id}/cancel
    ("client", "POST", "/runs/{run}/cancel", {"reason": {"a": 1}}, "reason"),
    ("client", "POST", "/runs/{run}/cancel", {"reason": "x" * 2001}, "reason"),
    ("client", "POST", "/runs/{run}/cancel", {"force": True}, "force"),
    # POST /runs/{id}/events, single form
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "type": "terminal_status"}, "type"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "type": "user_message"}, "type"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "type": "bogus"}, "type"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "type": "log", "payload": [1]},
     "payload"),
    ("runner", "POST", "/runs/{run}/events",
     {**FENCE, "type": "log", "payload": BIG_EVENT_PAYLOAD}, "payload"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "type": "log", "level": 3}, "level"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "lease_epoch": "one", "type": "log"},
     "lease_epoch"),
    ("runner", "POST", "/runs/{run}/events", {"runner_id": "runner-1", "type": "log"},
     "lease_epoch"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "runner_id": LONG_ID, "type": "log"},
     "runner_id"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE}, "events"),
    # POST /runs/{id}/events, batch form
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "events": "log"}, "events"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "events": []}, "events"),
    ("runner", "POST", "/runs/{run}/events", {**FENCE, "events": [{"type": "log"}] * 501},
     "events"),
    ("runner", "POST", "/runs/{run}/events",
     {**FENCE, "type": "log", "events": [{"type": "log"}]}, "events"),
    ("runner", "POST", "/runs/{run}/events",
     {**FENCE, "payload": {}, "events": [{"type": "log"}]}, "payload"),
    ("runner", "POST", "/runs/{run}/events",
     {**FENCE, "events": [{"type": "log"}, {"type": "terminal_status"}]}, "type"),
    ("runner", "POST", "/runs/{run}/events",
     {**FENCE, "events": [{"type": "log", "seq": 7}]}, "seq"),
    ("runner", "POST", "/runs/{run}/events",
     {**FENCE, "events": [{"type": "log", "payload": BIG_EVENT_PAYLOAD}]}, "payload"),
    # POST /runs/{id}/commands
    ("client", "POST", "/runs/{run}/commands", {"type": "bogus", "payload": {"text": "t"}},
     "type"),
    ("client", "POST", "/runs/{run}/commands", {"type": "turn", "payload": BIG_COMMAND_PAYLOAD},
     "payload"),
    ("client", "POST", "/runs/{run}/commands", {"type": "turn", "payload": "hello"}, "payload"),
    ("client", "POST", "/runs/{run}/commands", {"type": "turn", "payload": {}}, "payload"),
    ("client", "POST", "/runs/{run}/commands",
     {"type": "turn", "payload": {"text": "t"}, "idempotency_key": LONG_ID}, "idempotency_key"),
    ("client", "POST", "/runs/{run}/commands",
     {"type": "turn", "payload": {"text": "t"}, "priority": 1}, "priority"),
    ("client", "POST", "/runs/{run}/commands",
     {"type": "turn", "payload": {"text": "t"}, "dispatch": "default"}, "dispatch"),
    ("client", "POST", "/runs/{run}/commands",
     {"type": "turn", "payload": {"text": "t"}, "dispatch": [{}]}, "dispatch"),
    # POST /runs/{id}/claim, /heartbeat, /finish
    ("runner", "POST", "/runs/{run}/claim", {"runner_id": LONG_ID}, "runner_id"),
    ("runner", "POST", "/runs/{run}/claim", {}, "runner_id"),
    ("runner", "POST", "/runs/{run}/claim", {"runner_id": "r", "lease_ms": "long"}, "lease_ms"),
    ("runner", "POST", "/runs/{run}/claim", {"runner_id": "r", "lease_ms": 10}, "lease_ms"),
    ("runner", "POST", "/runs/{run}/claim", {"runner_id": "r", "lease_ms": 10**12}, "lease_ms"),
    ("runner", "POST", "/runs/{run}/claim", {"runner_id": "r", "epoch": 1}, "epoch"),
    ("runner", "POST", "/runs/{run}/heartbeat", {**FENCE, "lease_epoch": -1}, "lease_epoch"),
    ("runner", "POST", "/runs/{run}/heartbeat", {**FENCE, "lease_epoch": 2**31}, "lease_epoch"),
    ("runner", "POST", "/runs/{run}/heartbeat", {**FENCE, "lease_ms": [1]}, "lease_ms"),
    ("runner", "POST", "/runs/{run}/heartbeat", {**FENCE, "status": "ok"}, "status"),
    ("runner", "POST", "/runs/{run}/finish", {**FINISH, "terminal_status": "running"},
     "terminal_status"),
    ("runner", "POST", "/runs/{run}/finish", {**FINISH, "failure_kind": "oops"}, "failure_kind"),
    ("runner", "POST", "/runs/{run}/finish", {**FINISH, "thread_id": LONG_ID}, "thread_id"),
    ("runner", "POST", "/runs/{run}/finish", {**FINISH, "failure_message": "x" * 20_000},
     "failure_message"),
    ("runner", "POST", "/runs/{run}/finish", {**FINISH, "exit_code": 0}, "exit_code"),
    # POST /runs/{id}/runner-jobs, PATCH /runner-jobs/{id}
    ("runner", "POST", "/runs/{run}/runner-jobs", {**JOB, "command_id": LONG_ID}, "command_id"),
    ("runner", "POST", "/runs/{run}/runner-jobs", {**JOB, "namespace": {"a": 1}}, "namespace"),
    ("runner", "POST", "/runs/{run}/runner-jobs", {**JOB, "result": [1]}, "result"),
    ("runner", "POST", "/runs/{run}/runner-jobs", {**JOB, "node": "n1"}, "node"),
    ("runner", "POST", "/runs/{run}/runner-jobs", {**JOB, "idempotency_key": LONG_ID},
     "idempotency_key"),
    ("runner", "PATCH", "/runner-jobs/{job}", {}, "result"),
    ("runner", "PATCH", "/runner-jobs/{job}", {"result": "done"}, "result"),
    ("runner", "PATCH", "/runner-jobs/{job}", {"result": {"k": "x" * 70_000}}, "result"),
    ("runner", "PATCH", "/runner-jobs/{job}", {"result": {}, "image": "i"}, "image"),
    # POST /runners
    ("runner", "POST", "/runners", {"id": LONG_ID}, "id"),
    ("runner", "POST", "/runners", {"id": "r", "metadata": [1]}, "metadata"),
    ("runner", "POST", "/runners", {"id": "r", "placement": {"zone": "a"}}, "placement"),
    ("runner", "POST", "/runners", {"id": "r", "hostname": "h"}, "hostname"),
    # POST /commands/{id}/ack, /finish, /cancel
    ("runner", "POST", "/commands/{command}/ack", {**FENCE, "lease_epoch": "x"}, "lease_epoch"),
    ("runner", "POST", "/commands/{command}/ack", {**FENCE, "runner_id": LONG_ID}, "runner_id"),
    ("runner", "POST", "/commands/{command}/ack", {**FENCE, "seen": True}, "seen"),
    ("runner", "POST", "/commands/{command}/finish", {**FINISH, "terminal_status": "bogus"},
     "terminal_status"),
    ("runner", "POST", "/commands/{command}/finish", {**FINISH, "turn_id": LONG_ID}, "turn_id"),
    ("runner", "POST", "/commands/{command}/finish", {**FINISH, "output": "o"}, "output"),
    ("client", "POST", "/commands/{command}/cancel", {"reason": ["a"]}, "reason"),
    ("client", "POST", "/commands/{command}/cancel", {"why": "x"}, "why"),
]  # fmt: skip


@pytest.mark.parametrize(("who", "method", "path", "body", "field"), BAD_BODIES)
def test_bad_body_is_a_400_naming_the_field_and_writes_nothing(
    world: World, who: str, method: str, path: str, body: dict[str, Any], field: str
) -> None:
    before = world.snapshot()
    response = call(world.key(who), method, world.path(path), world.fill(body))
    _assert_invalid_naming(response, field)
    assert world.snapshot() == before


WRITE_ENDPOINTS = sorted({(who, method, path) for who, method, path, *_ in BAD_BODIES})


@pytest.mark.parametrize(("who", "method", "path"), WRITE_ENDPOINTS)
@pytest.mark.parametrize("body", [[{"type": "log"}], "hello", 42])
def test_a_json_body_that_is_not_an_object_is_a_400(
    world: World, who: str, method: str, path: str, body: Any
) -> None:
    before = world.snapshot()
    error = error_of(call(world.key(who), method, world.path(path), body), 400)
    assert error["code"] == "invalid"
    assert "JSON object" in error["message"]
    assert world.snapshot() == before


@pytest.mark.parametrize(("who", "method", "path"), WRITE_ENDPOINTS)
def test_a_body_that_is_not_json_is_a_400(world: World, who: str, method: str, path: str) -> None:
    send = getattr(world.key(who), method.lower())
    response = send(f"{API}{world.path(path)}", data="{not json", content_type="application/json")
    assert error_of(response, 400)["code"] == "invalid"


@pytest.mark.parametrize(
    ("who", "path", "body", "field"),
    [
        ("runner", "/runs/{run}/events", {**FENCE, "type": "log", "payload": {"t": "a\x00b"}},
         "payload"),
        ("runner", "/runs/{run}/events", {**FENCE, "events": [{"type": "log",
                                          "payload": {"a\x00": 1}}]}, "payload"),
        ("client", "/runs/{run}/commands", {"type": "turn", "payload": {"text": "a\x00"}},
         "payload"),
        ("client", "/runs", {**RUN, "execution_policy": {"k": ["\x00"]}}, "execution_policy"),
        ("client", "/runs", {**RUN, "project_id": "p\x00"}, "project_id"),
    ],
)  # fmt: skip
def test_nul_characters_postgres_cannot_store_are_a_400_not_a_500(
    world: World, who: str, path: str, body: dict[str, Any], field: str
) -> None:
    before = world.snapshot()
    _assert_invalid_naming(call(world.key(who), "POST", world.path(path), body), field)
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("who", "path", "raw", "field"),
    [
        ("runner", "/runs/{run}/events",
         '{"runner_id": "runner-1", "lease_epoch": 1, "type": "log", "payload": {"t": "\\ud800"}}',
         "payload"),
        ("client", "/runs/{run}/commands", '{"type": "turn", "payload": {"text": "\\udfff"}}',
         "payload"),
        ("client", "/runs/{run}/cancel", '{"reason": "\\ud800"}', "reason"),
    ],
)  # fmt: skip
def test_lone_surrogates_are_a_400_not_a_500(
    world: World, who: str, path: str, raw: str, field: str
) -> None:
    before = world.snapshot()
    response = world.key(who).post(
        f"{API}{world.path(path)}", data=raw, content_type="application/json"
    )
    _assert_invalid_naming(response, field)
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("who", "method", "path"),
    [
        ("client", "GET", "/runs/{bad}"),
        ("client", "GET", "/runs/{bad}/events"),
        ("client", "POST", "/runs/{bad}/cancel"),
        ("client", "GET", "/commands/{bad}"),
        ("runner", "POST", "/commands/{bad}/ack"),
        ("runner", "PATCH", "/runner-jobs/{bad}"),
    ],
)
@pytest.mark.parametrize("bad", ["run%00x", LONG_ID])
def test_a_path_id_that_cannot_be_an_id_is_a_400_naming_id(
    world: World, who: str, method: str, path: str, bad: str
) -> None:
    before = world.snapshot()
    _assert_invalid_naming(call(world.key(who), method, path.format(bad=bad), FENCE), "id")
    assert world.snapshot() == before


def test_batch_with_one_invalid_event_appends_none_of_them(world: World) -> None:
    before = event_count(world.run)
    events = [{"type": "log", "payload": {"n": n}} for n in range(3)] + [{"type": "bogus"}]
    response = world.runner.post(
        f"{API}/runs/{world.run.id}/events", {**FENCE, "events": events}, format="json"
    )
    _assert_invalid_naming(response, "type")
    assert "3" in error_of(response, 400)["message"]
    assert event_count(world.run) == before


BAD_QUERIES = [
    ("/runs/{run}/events?limit=0", "limit"),
    ("/runs/{run}/events?limit=501", "limit"),
    ("/runs/{run}/events?limit=ten", "limit"),
    ("/runs/{run}/events?wait=31", "wait"),
    ("/runs/{run}/events?wait=-1", "wait"),
    ("/runs/{run}/events?after_seq=-1", "after_seq"),
    ("/runs/{run}/events?after_seq=99999999999", "after_seq"),
    ("/runs/{run}/events?cursor=3", "cursor"),
    ("/runs/{run}/events/count?after_seq=-1", "after_seq"),
    ("/runs/{run}/commands?limit=0", "limit"),
    ("/runs/{run}/commands?after_seq=x", "after_seq"),
    ("/commands/{command}/events?limit=0", "limit"),
    ("/commands/{command}/events?limit=100000", "limit"),
    ("/runs/{run}/runner-jobs?command_id=" + LONG_ID, "command_id"),
    ("/runs/{run}/runner-jobs?state=open", "state"),
    ("/runs?page_size=0", "page_size"),
    ("/runs?page_size=1000", "page_size"),
    ("/runs?page=0", "page"),
    ("/runs?page=first", "page"),
    ("/runs?colour=red", "colour"),
    ("/runs?sort=bogus", "sort"),
    ("/runs?status=running&status=bogus", "status"),
    ("/runs?updated_after=yesterday", "updated_after"),
    ("/runs?project_id=" + LONG_ID, "project_id"),
    ("/runs?search=" + "s" * 201, "search"),
    ("/runs?search=a%00b", "search"),
    ("/runs?project_id=a%00b", "project_id"),
]


@pytest.mark.parametrize(("path", "field"), BAD_QUERIES)
def test_out_of_range_or_unknown_query_parameter_is_a_400_naming_it(
    world: World, path: str, field: str
) -> None:
    _assert_invalid_naming(world.client.get(f"{API}{world.path(path)}"), field)
