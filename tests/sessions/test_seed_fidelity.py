"""Seed fidelity of sessions (issue 17 items 1, 5, 7, 9): each test pins what the seed's
store did and this rewrite had dropped."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from agentrun.tenancy import Scope
from runs.models import Event, Run
from sessions.models import Session
from sessions.services.lifecycle import StorageFacts, refresh_session_storage
from tests.builders import key_client, make_run
from tests.sessions.helpers import admit, turn_body
from tests.sessions.world import API, claim, idle_session, post_turn

pytestmark = pytest.mark.django_db


# ---- item 1: a turn's workspace_ref keeps every key -------------------------------------


def test_a_turns_workspace_ref_keeps_extra_keys() -> None:
    body = turn_body("hi")
    body["run"]["workspace_ref"] = {"path": "/work/repo", "checkout": {"sha": "abc"}}
    response = post_turn(key_client(role="client"), "s-fid-ws", body)
    assert response.status_code == 201, response.json()
    assert response.json()["run"]["workspace_ref"]["checkout"] == {"sha": "abc"}


# ---- item 5: the stale admission's terminal event names its reason -----------------------


def test_a_stale_turns_terminal_status_carries_the_seeds_reason() -> None:
    old = admit("s-fid-stale", "first")
    claim(old.run.id, runner_id="runner-dead")
    Run.objects.filter(pk=old.run.id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert post_turn(key_client(role="client"), "s-fid-stale", turn_body("next")).status_code == 201
    terminal = Event.objects.get(run_id=old.run.id, type="terminal_status")
    assert terminal.payload["reason"] == "session-turn-admission-stale-lease"


# ---- item 7: a session's latest resource run; expired PVC storage listed ----------------


def test_the_latest_resource_run_of_a_session() -> None:
    ref = {"session_id": "s-fid-res", "metadata": {}}
    api = key_client(role="client")
    path = f"{API}/sessions/s-fid-res/resource-run"
    make_run(session_ref=ref)
    assert api.get(path).json() == {"run": None}
    bundled = make_run(session_ref=ref, resource_bundle_ref={"bundle": "b-1"})
    make_run(session_ref=ref)  # newer, but without a bundle
    make_run(session_ref={"session_id": "s-fid-other", "metadata": {}}, resource_bundle_ref={})
    assert api.get(path).json()["run"]["id"] == bundled.id
    assert key_client(role="client", tenant_id="tenant-b").get(path).status_code == 404


def _pvc_session(session_id: str, *, expired: bool, pvc: bool = True) -> Session:
    when = timezone.now() + (timedelta(hours=-1) if expired else timedelta(hours=1))
    idle_session(session_id, expires_at=when)
    claim = {"storage_pvc_name": f"pvc-{session_id}", "storage_namespace": "ns"}
    facts = StorageFacts(storage_kind="pvc", **claim) if pvc else StorageFacts(storage_kind="none")
    return refresh_session_storage(session_id=session_id, scope=Scope.operator(), facts=facts)


def test_gc_sessions_lists_expired_pvc_sessions_and_deletes_nothing() -> None:
    _pvc_session("s-pvc-old", expired=True)
    _pvc_session("s-pvc-live", expired=False)
    _pvc_session("s-none-old", expired=True, pvc=False)
    out = StringIO()
    call_command("gc_sessions", "--list-pvcs", "--json", stdout=out)
    rows = json.loads(out.getvalue())["expired_pvc_sessions"]
    assert [(r["session_id"], r["storage_pvc_name"], r["storage_namespace"]) for r in rows] == [
        ("s-pvc-old", "pvc-s-pvc-old", "ns")
    ]
    assert Session.objects.get(pk="s-pvc-old").storage_kind == "pvc"  # listed, not touched


# ---- item 9: the session list's count, cursor and filters; trace and output cursor ------


def test_the_session_list_answers_the_seeds_fields_and_takes_state_default() -> None:
    idle_session("s-fid-a")
    idle_session("s-fid-b")
    api = key_client(role="client")
    page = api.get(f"{API}/sessions?state=default&limit=1").json()
    assert page["count"] == len(page["items"]) == 1
    assert page["cursor"] == str(page["items"][0]["version"])
    assert page["filters"] == {
        "state": "default",
        "backend_profile": None,
        "reader_id": None,
        "cursor": None,
        "limit": 1,
    }
    assert len(api.get(f"{API}/sessions?state=default").json()["items"]) == 2


def test_trace_and_output_answer_the_seeds_cursor() -> None:
    admitted = admit("s-fid-trace", "show me")
    api = key_client(role="client")
    trace = api.get(f"{API}/sessions/s-fid-trace/trace").json()
    last_seq = Event.objects.filter(run_id=admitted.run.id).order_by("-seq").first().seq
    assert trace["cursor"] == str(last_seq) == str(trace["next_after_seq"])
    output = api.get(f"{API}/sessions/s-fid-trace/output").json()
    assert output["cursor"] == str(output["items"][-1]["seq"])
    empty = api.get(f"{API}/sessions/s-fid-trace/trace?after_seq={last_seq}").json()
    assert (empty["cursor"], empty["count"]) == (None, 0)
