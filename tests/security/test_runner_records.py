"""Attack: tenant B's runner key registers a runner under tenant A's runner id
(`POST /runners`) to overwrite A's runner record (issue 16, finding 6). Runner records
belong to a tenant: the registration is a 409 and A's record is left as it was, while a
runner of A's own tenant still refreshes it (the seed's upsert within a tenant)."""

from __future__ import annotations

import pytest

from agentrun.errors import AgentRunError
from agentrun.tenancy import Scope
from runs.models import Runner
from runs.services.runners import register_runner
from tests.builders import key_client, make_run
from tests.runs.threads import race

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


@pytest.mark.django_db(transaction=True)
def test_two_tenants_racing_for_a_new_runner_id_never_share_the_record() -> None:
    """Both first registrations at the same instant: one inserts, the other is refused,
    and the record is wholly the winner's (no interleaved overwrite)."""
    tenants = ["tenant-a", "tenant-b"] * 3
    runs = {tenant: make_run(tenant_id=tenant) for tenant in set(tenants)}
    scopes = {tenant: Scope(tenant_id=tenant, run_id=runs[tenant].id) for tenant in runs}

    def register(tenant: str) -> Runner:
        return register_runner(
            scope=scopes[tenant], runner_id="runner-race", run_id=runs[tenant].id,
            placement=tenant,
        )  # fmt: skip

    results = race([lambda t=t: register(t) for t in tenants])
    winners = {r.tenant_id for r in results if isinstance(r, Runner)}
    refused = [r for r in results if isinstance(r, AgentRunError)]
    assert len(winners) == 1 and len(refused) == 3, results
    assert {r.code for r in refused} == {"runner_id_taken"}
    (winner,) = winners
    stored = Runner.objects.get(pk="runner-race")
    assert (stored.tenant_id, stored.placement, stored.run_id) == (
        winner,
        winner,
        runs[winner].id,
    )
