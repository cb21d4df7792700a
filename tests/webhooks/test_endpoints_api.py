"""The webhooks API (SPEC §9.5): register (secret shown once), list, retrieve, change,
rotate, delete, deliveries and replay; bad input is a 400 naming the field, another
tenant's endpoint a 404."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests import builders
from tests.webhooks.helpers import append_logs, register, relay_until_idle, session_run
from tests.webhooks.receiver import Receiver
from webhooks.models import WebhookDelivery

pytestmark = pytest.mark.django_db


def test_register_shows_the_secret_once_and_crud_works(client_api: APIClient) -> None:
    made = register(client_api, "http://127.0.0.1:9/hook", ["log", "agent_message"])
    assert made["secret"].startswith("whsec_") and made["tenant_id"] == "tenant-a"
    one = client_api.get(f"/api/v1/webhooks/{made['id']}").json()
    assert "secret" not in one and one["event_types"] == ["log", "agent_message"]
    assert [e["id"] for e in client_api.get("/api/v1/webhooks").json()] == [made["id"]]

    changed = client_api.patch(
        f"/api/v1/webhooks/{made['id']}", {"event_types": ["*"], "enabled": False}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert changed.json()["event_types"] == ["*"]
    rotated = client_api.post(f"/api/v1/webhooks/{made['id']}/rotate-secret").json()
    assert rotated["secret"] != made["secret"] and rotated["previous_secret_expires_at"]

    assert client_api.delete(f"/api/v1/webhooks/{made['id']}").status_code == 204
    assert client_api.get(f"/api/v1/webhooks/{made['id']}").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "not a url", "event_types": ["*"]}, "url"),
        ({"url": "ftp://127.0.0.1/x", "event_types": ["*"]}, "url"),
        ({"url": "http://127.0.0.1/x", "event_types": ["no_such_type"]}, "event_types"),
        ({"url": "http://127.0.0.1/x", "event_types": []}, "event_types"),
        ({"url": "http://127.0.0.1/x", "event_types": "log"}, "event_types"),
        ({"url": "http://127.0.0.1/x", "event_types": ["*"], "colour": "red"}, "colour"),
        ({"url": "http://nowhere.invalid/x", "event_types": ["*"]}, "url"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    client_api: APIClient, body: dict[str, object], field: str
) -> None:
    response = client_api.post("/api/v1/webhooks", body, format="json")
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert field in error["message"] or field in str(error["details"])


def test_another_tenants_endpoint_is_a_404_everywhere(client_api: APIClient) -> None:
    theirs = register(
        builders.key_client(role="client", tenant_id="tenant-b"), "http://127.0.0.1:9/"
    )
    base = f"/api/v1/webhooks/{theirs['id']}"
    assert client_api.get(base).status_code == 404
    assert client_api.patch(base, {"enabled": False}, format="json").status_code == 404
    assert client_api.delete(base).status_code == 404
    assert client_api.get(f"{base}/deliveries").status_code == 404
    assert client_api.post(f"{base}/replay", {"after": 0}, format="json").status_code == 404
    assert client_api.post(f"{base}/rotate-secret").status_code == 404
    assert client_api.get("/api/v1/webhooks").json() == []


def test_deliveries_list_and_replay_in_order(client_api: APIClient, receiver: Receiver) -> None:
    made = register(client_api, receiver.url, ["log"])
    receiver.secret = made["secret"]
    run = session_run("sess-replay")
    events = append_logs(run, 5)
    relay_until_idle()
    assert receiver.accepted_ids() == [e.id for e in events]

    page = client_api.get(f"/api/v1/webhooks/{made['id']}/deliveries?limit=3").json()
    assert [d["event_id"] for d in page["items"]] == [e.id for e in events[::-1][:3]]
    assert page["items"][0]["state"] == "delivered" and page["items"][0]["last_status_code"] == 200
    second = page["items"][-1]["seq"] - 1  # the second event's delivery
    replay = client_api.post(
        f"/api/v1/webhooks/{made['id']}/replay", {"after": second}, format="json"
    )
    assert replay.status_code == 200 and replay.json()["replayed"] == 3
    relay_until_idle()
    assert receiver.accepted_ids() == [e.id for e in events] + [e.id for e in events[2:]]
    assert WebhookDelivery.objects.filter(replay_of__isnull=False).count() == 3

    bad = client_api.post(
        f"/api/v1/webhooks/{made['id']}/replay", {"after": "yesterday"}, format="json"
    )
    assert bad.status_code == 400 and "after" in bad.json()["error"]["message"]
    by_time = client_api.post(
        f"/api/v1/webhooks/{made['id']}/replay",
        {"after": events[0].created_at.isoformat()},
        format="json",
    )
    assert by_time.status_code == 200


def test_an_operator_names_the_tenant(operator_api: APIClient) -> None:
    body = {"url": "http://127.0.0.1:9/", "event_types": ["*"]}
    assert operator_api.post("/api/v1/webhooks", body, format="json").status_code == 400
    made = operator_api.post("/api/v1/webhooks", {**body, "tenant_id": "t-9"}, format="json")
    assert made.status_code == 201 and made.json()["tenant_id"] == "t-9"
