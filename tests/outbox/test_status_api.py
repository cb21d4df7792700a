"""`GET /api/v1/outbox/status`: operator only, backlog, retries and the first error."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from outbox.kafka import DeliveryFailure
from outbox.services.relay import claim_outbox_records, settle_outbox_records
from tests.builders import api_client, key_client
from tests.outbox.builders import append_logs, claimed_run

URL = "/api/v1/outbox/status"
pytestmark = pytest.mark.django_db(transaction=True)


def test_the_status_needs_an_operator_key() -> None:
    assert api_client(None).get(URL).status_code == 401
    assert api_client("ar_client_not-a-key").get(URL).status_code == 401
    forbidden = key_client(role="client").get(URL)
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "forbidden"


def test_an_unknown_query_parameter_is_a_400_naming_it(operator_api: APIClient) -> None:
    response = operator_api.get(URL, {"verbose": "1"})
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == "verbose"


def test_an_empty_outbox_reports_nothing_pending(operator_api: APIClient, outbox_off: None) -> None:
    body = operator_api.get(URL).json()
    assert body == {
        "enabled": False,
        "topic": "agentrun.events",
        "backlog": 0,
        "retrying": 0,
        "leased": 0,
        "oldest_pending_at": None,
        "oldest_pending_age_seconds": None,
        "max_attempt_count": 0,
        "first_error": None,
        "first_error_record": None,
    }


def test_the_status_shows_backlog_leases_retries_and_the_first_error(
    operator_api: APIClient, outbox_topic: str
) -> None:
    run = claimed_run()
    append_logs(run, 4)
    pending = run.outbox_records.count()
    body = operator_api.get(URL).json()
    assert (body["enabled"], body["topic"], body["backlog"], body["retrying"]) == (
        True,
        outbox_topic,
        pending,
        0,
    )
    assert body["oldest_pending_at"].endswith("Z") and body["oldest_pending_age_seconds"] >= 0

    claims = claim_outbox_records(owner="relay-test", limit=2, lease_ms=60_000)
    assert operator_api.get(URL).json()["leased"] == 2
    failure = DeliveryFailure(
        "_MSG_TIMED_OUT", "Local: Message timed out, Bearer sk-abcdefghijklmnopqrstu"
    )
    settle_outbox_records(claims=claims, outcomes=[failure, None])

    body = operator_api.get(URL).json()
    assert (body["backlog"], body["retrying"], body["leased"], body["max_attempt_count"]) == (
        pending,
        2,
        0,
        1,
    )
    error = body["first_error"]
    assert error["code"] == "_MSG_TIMED_OUT" and error["attempt"] == 1
    assert "sk-abc" not in error["message"] and "[redacted]" in error["message"]
    assert body["first_error_record"] == {
        "id": claims[0].id,
        "partition_key": claims[0].partition_key,
        "attempt_count": 1,
    }
