"""`PUT /sessions/{id}` and the storage routes: refresh, evict, tenant scoping."""

from __future__ import annotations

from typing import Any

import pytest

from runs.models import Run
from sessions.models import Session
from sessions.services.lifecycle import session_storage_dir
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.runs.threads import race
from tests.sessions.helpers import turn_body
from tests.sessions.world import API, clients, idle_session, post_turn, session, written

UPSERT = {"project_id": "proj-1", "backend_profile": "scripted"}
SHA = "a" * 64


@pytest.mark.django_db
def test_put_creates_a_session_then_updates_it_with_a_new_version() -> None:
    api = key_client(role="client")
    created = api.put(
        f"{API}/sessions/s-put", {**UPSERT, "metadata": {"title": "x"}}, format="json"
    )
    assert created.status_code == 200, created.json()
    assert created.json()["tenant_id"] == "tenant-a"
    assert created.json()["execution_state"] == "idle"
    updated = api.put(
        f"{API}/sessions/s-put",
        {**UPSERT, "conversation_id": "conv-2", "metadata": {"pinned": True}},
        format="json",
    )
    assert updated.status_code == 200
    assert updated.json()["version"] > created.json()["version"]
    stored = session("s-put")
    assert (stored.conversation_id, stored.metadata) == ("conv-2", {"pinned": True})


@pytest.mark.django_db
def test_put_on_another_tenants_session_is_not_found_and_changes_nothing() -> None:
    theirs = idle_session("s-put-theirs", tenant_id="tenant-b", metadata={"mine": True})
    before = written()
    response = key_client(role="client").put(
        f"{API}/sessions/s-put-theirs", {**UPSERT, "metadata": {"stolen": True}}, format="json"
    )
    assert error_of(response, 404)["code"] == "not_found"
    assert written() == before
    stored = session("s-put-theirs")
    assert (stored.tenant_id, stored.metadata, stored.version) == (
        "tenant-b",
        {"mine": True},
        theirs.version,
    )


@pytest.mark.django_db(transaction=True)
def test_concurrent_puts_and_turns_creating_one_session_do_not_collide() -> None:
    racers = clients(8)
    for attempt in range(3):
        session_id = f"s-put-race-{attempt}"
        work = [
            lambda c=c, s=session_id: c.put(f"{API}/sessions/{s}", UPSERT, format="json")
            for c in racers[:4]
        ] + [
            lambda c=c, i=i, s=session_id: post_turn(c, s, turn_body(f"turn {i}"))
            for i, c in enumerate(racers[4:])
        ]
        results = race(work)
        assert not [r for r in results if isinstance(r, BaseException)], results
        assert sorted(r.status_code for r in results) == [200] * 4 + [201] + [409] * 3
        assert Session.objects.filter(pk=session_id).count() == 1
        assert Run.objects.filter(session_ref__session_id=session_id).count() == 1


@pytest.mark.django_db
def test_storage_refresh_records_local_facts_and_bumps_the_version() -> None:
    idle = idle_session("s-store")
    body = {
        "storage_kind": "local",
        "storage_path": str(session_storage_dir("tenant-a", "s-store")),
        "storage_size_bytes": 2048,
        "storage_files_count": 3,
        "storage_sha256": SHA,
        "codex_rollout_subdir": "rollouts",
    }
    response = key_client(role="client").put(f"{API}/sessions/s-store/storage", body, format="json")
    assert response.status_code == 200, response.json()
    out = response.json()
    assert out["version"] > idle.version
    assert {k: out[k] for k in body} == body
    assert out["storage_updated_at"] is not None


@pytest.mark.django_db
def test_storage_refresh_records_a_pvc() -> None:
    idle_session("s-pvc")
    body = {"storage_kind": "pvc", "storage_pvc_name": "pvc-1", "storage_namespace": "agents"}
    response = key_client(role="client").put(f"{API}/sessions/s-pvc/storage", body, format="json")
    assert response.status_code == 200
    assert (session("s-pvc").storage_kind, session("s-pvc").storage_pvc_name) == ("pvc", "pvc-1")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"storage_kind": "local"}, "storage_path"),
        ({"storage_kind": "pvc"}, "storage_pvc_name"),
        ({"storage_kind": "evicted"}, "storage_kind"),
        ({"storage_kind": "local", "storage_path": "/x", "storage_sha256": "zz"}, "storage_sha256"),
        (
            {"storage_kind": "local", "storage_path": "/x", "storage_size_bytes": -1},
            "storage_size_bytes",
        ),
        # Past the column's integer / bigint (schemathesis found a 500 from the database).
        (
            {"storage_kind": "local", "storage_path": "/x", "storage_files_count": 2**31},
            "storage_files_count",
        ),
        (
            {"storage_kind": "local", "storage_path": "/x", "storage_size_bytes": 2**63},
            "storage_size_bytes",
        ),
        ({"storage_kind": "local", "storage_path": "/x", "colour": "red"}, "colour"),
    ],
)
def test_bad_storage_facts_are_a_400_naming_the_field(body: dict[str, Any], field: str) -> None:
    idle_session("s-store-bad")
    before = (written(), session("s-store-bad").version)
    response = key_client(role="client").put(
        f"{API}/sessions/s-store-bad/storage", body, format="json"
    )
    assert error_of(response, 400)["details"]["field"] == field
    assert (written(), session("s-store-bad").version) == before


@pytest.mark.django_db
def test_evicting_storage_marks_it_evicted_with_a_new_version() -> None:
    idle_session("s-evict")
    api = key_client(role="client")
    stored = api.put(
        f"{API}/sessions/s-evict/storage",
        {"storage_kind": "local", "storage_path": str(session_storage_dir("tenant-a", "s-evict"))},
        format="json",
    ).json()
    response = api.post(f"{API}/sessions/s-evict/storage/evict", {}, format="json")
    assert response.status_code == 200, response.json()
    out = response.json()
    assert out["storage_kind"] == "evicted" and out["storage_evicted_at"] is not None
    assert out["version"] > stored["version"]


@pytest.mark.django_db
def test_storage_routes_on_another_tenants_session_are_not_found() -> None:
    theirs = idle_session("s-store-theirs", tenant_id="tenant-b")
    api = key_client(role="client")
    refresh = api.put(
        f"{API}/sessions/s-store-theirs/storage",
        {"storage_kind": "local", "storage_path": "/x"},
        format="json",
    )
    assert error_of(refresh, 404)["code"] == "not_found"
    evict = api.post(f"{API}/sessions/s-store-theirs/storage/evict", {}, format="json")
    assert error_of(evict, 404)["code"] == "not_found"
    stored = session("s-store-theirs")
    assert (stored.storage_kind, stored.version) == ("none", theirs.version)
