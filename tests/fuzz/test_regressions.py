"""Regression tests for what the schemathesis run found (tests/fuzz/README.md lists them)."""

from __future__ import annotations

from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from runs.control_models import CancelRequest
from tests.api.helpers import API, claimed_run_with_command, error_of, fencing, make_command
from tests.builders import key_client, make_run

pytestmark = pytest.mark.django_db


# ---- 1. an HTTP TRACE reached the sessions `trace` action: a 500 on the list ----------


@pytest.mark.parametrize("path", ["/sessions", "/sessions/sess-1", "/sessions/sess-1/output"])
def test_http_trace_on_sessions_routes_is_405_not_the_trace_action(path: str) -> None:
    client = key_client(role="client")
    response = client.generic("TRACE", f"{API}{path}?reader_id=r")
    assert error_of(response, 405)["code"] == "method_not_allowed"
    assert "TRACE" not in response["Allow"]


def test_the_session_trace_action_still_answers_get() -> None:
    client = key_client(role="client")
    response = client.get(f"{API}/sessions/sess-missing/trace")
    assert error_of(response, 404)["code"] == "not_found"


# ---- 2. JSON values of the wrong type were coerced instead of refused ------------------


def test_a_number_where_a_string_is_expected_is_a_400_naming_the_field() -> None:
    run = make_run()
    client = key_client(role="client")
    response = client.post(f"{API}/runs/{run.id}/cancel", {"reason": -5.7e16}, format="json")
    error = error_of(response, 400)
    assert error["details"]["field"] == "reason"
    assert not CancelRequest.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("source_commit", 0), ("placement", True), ("metadata", [None, None])],
)
def test_runner_registration_refuses_wrong_json_types(field: str, value: Any) -> None:
    _, _, runner = claimed_run_with_command()
    body = {"id": "runner-1", field: value}
    assert error_of(runner.post(f"{API}/runners", body, format="json"), 400)["details"][
        "field"
    ] == (field)


def test_a_string_where_an_integer_is_expected_is_a_400() -> None:
    run, command, runner = claimed_run_with_command()
    body = {**fencing(run), "lease_epoch": str(run.lease_epoch)}
    response = runner.post(f"{API}/commands/{command.id}/ack", body, format="json")
    assert error_of(response, 400)["details"]["field"] == "lease_epoch"
    command.refresh_from_db()
    assert command.state == "pending"


def test_query_strings_still_parse_numbers() -> None:
    run = make_run()
    make_command(run)
    page = key_client(role="client").get(f"{API}/runs/{run.id}/events?after_seq=1&limit=5")
    assert page.status_code == 200
    assert [event["seq"] for event in page.json()["items"]] == [2, 3]


# ---- 3. an empty `updated_after` was taken as no filter ------------------------------


def test_an_empty_updated_after_is_a_400() -> None:
    response = key_client(role="client").get(f"{API}/runs?updated_after=")
    assert error_of(response, 400)["details"]["field"] == "updated_after"


def test_an_empty_sort_is_a_400() -> None:
    response = key_client(role="client").get(f"{API}/runs?sort=")
    assert error_of(response, 400)["details"]["field"] == "sort"


# ---- 4. the OpenAPI document promised other shapes than the API answers --------------


@pytest.fixture(scope="module")
def schema(django_db_blocker: Any) -> dict[str, Any]:
    with django_db_blocker.unblock():
        return SchemaGenerator().get_schema(request=None, public=True)


def _ok(schema: dict[str, Any], method: str, path: str, status: str = "200") -> dict[str, Any]:
    response = schema["paths"][f"/api/v1{path}"][method]["responses"][status]
    return response["content"]["application/json"]["schema"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/runs"),
        ("get", "/sessions"),
        ("get", "/backends"),
        ("get", "/runs/{id}/commands"),
        ("get", "/runs/{id}/cancel-requests"),
        ("get", "/runs/{id}/runner-jobs"),
        ("get", "/commands/{id}/events"),
    ],
)
def test_collections_are_documented_as_the_objects_they_answer(
    schema: dict[str, Any], method: str, path: str
) -> None:
    assert "$ref" in _ok(schema, method, path), "documented as a bare array"


def test_every_operation_documents_the_error_envelope(schema: dict[str, Any]) -> None:
    for path, operations in schema["paths"].items():
        if not path.startswith("/api/v1/"):
            continue
        for method, operation in operations.items():
            for status in ("400", "401", "403", "404"):
                body = operation["responses"][status]["content"]["application/json"]
                assert body["schema"] == {"$ref": "#/components/schemas/Error"}, (method, path)


def test_request_bodies_are_strict_and_json_objects_are_objects(schema: dict[str, Any]) -> None:
    components = schema["components"]["schemas"]
    run_create = components["RunCreateInRequest"]
    assert run_create["additionalProperties"] is False
    assert run_create["properties"]["execution_policy"]["type"] == "object"
    assert run_create["properties"]["trace_sink"]["nullable"] is True
    patch = schema["paths"]["/api/v1/runner-jobs/{id}"]["patch"]["requestBody"]
    patch_schema = patch["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert components[patch_schema]["required"] == ["result"]


def test_runner_registration_documents_the_200_it_answers(schema: dict[str, Any]) -> None:
    assert set(schema["paths"]["/api/v1/runners"]["post"]["responses"]) >= {"200"}
    assert "201" not in schema["paths"]["/api/v1/runners"]["post"]["responses"]
