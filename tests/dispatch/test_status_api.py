"""GET /api/v1/dispatch/status: the dispatch backlog, for operators only."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from dispatch.services.claims import claim_intents
from tests.builders import api_client, key_client
from tests.dispatch.helpers import make_dispatch_command

URL = "/api/v1/dispatch/status"


@pytest.mark.django_db(transaction=True)
def test_an_operator_sees_the_backlog() -> None:
    operator_api = key_client(role="operator", tenant_id="ops")
    for _ in range(3):
        make_dispatch_command()
    claim_intents(owner="w", lease_ms=60_000, limit=1)
    response = operator_api.get(URL)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["queue"] == "runner-dispatch"
    assert (body["total_count"], body["backlog_count"], body["due_count"]) == (3, 3, 2)
    assert (body["pending_count"], body["dispatching_count"]) == (2, 1)
    assert body["max_attempt_count"] == 1 and body["oldest_pending_at"] is not None


@pytest.mark.django_db
def test_clients_and_runners_get_403_and_anonymous_callers_401() -> None:
    for role in ("client", "runner"):
        client = key_client(role=role, run_id="run_x" if role == "runner" else None)
        response = client.get(URL)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    assert api_client(None).get(URL).status_code == 401


@pytest.mark.django_db
def test_an_empty_table_has_zero_counts(operator_api: APIClient) -> None:
    body = operator_api.get(URL).json()
    assert (body["total_count"], body["max_attempt_count"], body["oldest_pending_at"]) == (
        0,
        0,
        None,
    )
