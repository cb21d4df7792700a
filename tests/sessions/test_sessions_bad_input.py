"""Bad input to the sessions API is a 400 (or 401/403/404) naming the problem; nothing is
written."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.validation import KIB
from tests.api.helpers import error_of, run_body
from tests.builders import api_client, key_client
from tests.sessions.helpers import turn_body
from tests.sessions.world import API, idle_session, written

pytestmark = pytest.mark.django_db

BIG_METADATA = {"blob": "x" * (64 * KIB + 1)}


def _with_run(**run: Any) -> dict[str, Any]:
    body = turn_body("hello")
    body["run"].update(run)
    return body


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=bogus", "state"),
        ("state=", "state"),
        ("cursor=abc", "cursor"),
        ("cursor=-1", "cursor"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("colour=red", "colour"),
    ],
)
def test_a_bad_list_query_is_a_400_naming_the_parameter(query: str, field: str) -> None:
    error = error_of(key_client(role="client").get(f"{API}/sessions?{query}"), 400)
    assert error["code"] == "invalid" and error["details"]["field"] == field
    assert field in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_with_run(metadata=BIG_METADATA), "run.metadata"),
        (_with_run(colour="red"), "run.colour"),
        (_with_run(tenant_id="tenant-b"), "run.tenant_id"),
        (_with_run(workspace_ref={"extra": 1}), "run.workspace_ref.path"),
        ({**turn_body("hi"), "tenant_id": "tenant-b"}, "tenant_id"),
        ({**turn_body("hi"), "when_busy": "sometimes"}, "when_busy"),
        ({**turn_body("hi"), "surprise": True}, "surprise"),
        (turn_body(""), "command.payload"),
        ({"run": turn_body()["run"], "command": {"payload": {}}}, "command.payload"),
        ({"command": turn_body()["command"]}, "run"),
        (_with_run(id="x" * 201), "run.id"),
    ],
)
def test_a_bad_turn_is_a_400_naming_the_field_and_writes_nothing(
    body: dict[str, Any], field: str
) -> None:
    idle_session("s-bad")
    before = written()
    response = key_client(role="client").post(f"{API}/sessions/s-bad/turns", body, format="json")
    error = error_of(response, 400)
    assert error["details"]["field"] == field, error
    assert written() == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (_with_run(metadata=BIG_METADATA), "run.metadata"),
        (_with_run(backend_profile="no-such-backend"), "backend_profile"),
    ],
)
def test_a_bad_turn_to_a_new_session_creates_no_session(body: dict[str, Any], field: str) -> None:
    before = written()
    response = key_client(role="client").post(f"{API}/sessions/s-never/turns", body, format="json")
    assert error_of(response, 400)["details"]["field"] == field
    assert written() == before


def test_a_session_id_over_200_characters_is_a_400() -> None:
    response = key_client(role="client").get(f"{API}/sessions/{'x' * 201}")
    assert error_of(response, 400)["details"]["field"] == "id"


def test_an_upsert_with_oversize_metadata_is_a_400_and_writes_nothing() -> None:
    idle_session("s-upsert-big")
    before = written()
    body = {"project_id": "proj-1", "backend_profile": "scripted", "metadata": BIG_METADATA}
    response = key_client(role="client").put(f"{API}/sessions/s-upsert-big", body, format="json")
    assert error_of(response, 400)["details"]["field"] == "metadata"
    assert written() == before


def test_a_run_with_an_oversize_session_ref_metadata_is_a_400_and_writes_nothing() -> None:
    before = written()
    body = run_body(session_ref={"session_id": "s-ref-big", "metadata": BIG_METADATA})
    response = key_client(role="client").post(f"{API}/runs", body, format="json")
    assert error_of(response, 400)["details"]["field"] == "session_ref.metadata"
    assert written() == before


def test_a_turn_to_another_tenants_session_is_refused_and_writes_nothing() -> None:
    idle_session("s-theirs", tenant_id="tenant-b")
    before = written()
    response = key_client(role="client").post(
        f"{API}/sessions/s-theirs/turns", turn_body("hi"), format="json"
    )
    assert error_of(response, 404)["code"] == "not_found"
    assert written() == before


def test_another_tenants_session_is_not_found() -> None:
    idle_session("s-theirs", tenant_id="tenant-b")
    response = key_client(role="client").get(f"{API}/sessions/s-theirs")
    assert error_of(response, 404)["details"] == {"kind": "session", "id": "s-theirs"}


def test_sessions_need_a_key_and_are_not_for_runners() -> None:
    idle_session("s-auth")
    assert error_of(api_client(None).get(f"{API}/sessions"), 401)["code"] == "unauthorized"
    runner = key_client(role="runner", run_id="run_x")
    assert error_of(runner.get(f"{API}/sessions/s-auth"), 403)["code"] == "forbidden"


def test_an_operator_turn_must_name_the_tenant() -> None:
    before = written()
    operator = key_client(role="operator", tenant_id="ops")
    response = operator.post(f"{API}/sessions/s-op/turns", turn_body("hi"), format="json")
    assert error_of(response, 400)["details"]["field"] == "tenant_id"
    assert written() == before
    named = {**turn_body("hi"), "tenant_id": "tenant-c"}
    created = operator.post(f"{API}/sessions/s-op/turns", named, format="json")
    assert created.status_code == 201 and created.json()["run"]["tenant_id"] == "tenant-c"
