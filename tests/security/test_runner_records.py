"""Attack: tenant B's runner key registers a runner under tenant A's runner id
(`POST /runners`) to overwrite A's runner record (issue 16, finding 6). Runner records
belong to a tenant: the registration is a 409 and A's record is left as it was, while a
runner of A's own tenant still refreshes it (the seed's upsert within a tenant)."""

from __future__ import annotations

import pytest

from runs.models import Runner
from tests.builders import key_client, make_run

pytestmark = pytest.mark.django_db
RUNNER = "runner-shared"


def _register(tenant: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
    run = make_run(tenant_id=tenant)
    client = key_client(role="runner", tenant_id=tenant, run_id=run.id)
    response = client.post("/api/v1/runners", {"id": RUNNER, **body}, format="json")
    return response.status_code, response.json()


def test_another_tenants_runner_key_cannot_overwrite_my_runner_record() -> None:
    status, mine = _register("tenant-a", {"backend_profile": "scripted", "placement": "a"})
    assert status == 200
    before = Runner.objects.values().get(pk=RUNNER)

    status, body = _register("tenant-b", {"backend_profile": "codex", "placement": "evil",
                                          "metadata": {"owned": True}})  # fmt: skip

    assert status == 409, body
    assert body["error"]["code"] == "runner_id_taken"
    assert Runner.objects.values().get(pk=RUNNER) == before
    assert before["tenant_id"] == "tenant-a" and before["run_id"] == mine["run_id"]


def test_a_runner_of_the_same_tenant_refreshes_the_record() -> None:
    _register("tenant-a", {"placement": "a"})
    first = Runner.objects.get(pk=RUNNER)
    status, body = _register("tenant-a", {"placement": "b"})
    assert status == 200, body
    again = Runner.objects.get(pk=RUNNER)
    assert (again.placement, again.run_id) == ("b", body["run_id"])
    assert again.registered_at == first.registered_at
