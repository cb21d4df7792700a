import pytest

from tests.builders import key_client, make_run

pytestmark = pytest.mark.django_db


def test_client_creates_and_reads_a_run() -> None:
    api = key_client(role="client")
    created = api.post("/api/v1/runs", {
        "project_id": "p", "workspace_ref": {"path": "/w"}, "provider_id": "openai",
        "backend_profile": "scripted",
    }, format="json")
    assert created.status_code == 201, created.json()
    run_id = created.json()["id"]
    assert api.get(f"/api/v1/runs/{run_id}").json()["status"] == "pending"
    listed = api.get("/api/v1/runs").json()
    assert listed["total"] == 1
    assert make_run().status == "pending"
