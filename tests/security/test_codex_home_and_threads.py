"""Issue 16 finding 4, as the attack: every tenant's runs shared one Codex home (its
credentials and every transcript), and a client could set any `thread_id` on its session
— another tenant's included — for Codex to resume.

Now each session (or sessionless run) gets its own home under the data directory, 0700,
and thread ids come only from what a runner reports at finish; a client sending one is a
400 naming the key, and a session upsert leaves the recorded thread alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from dispatch.launchers import LaunchRequest
from dispatch.launchers.local import codex_home
from runs.services.lifecycle import claim_run, finish_run
from runs.services.terminal import TurnResult
from sessions.models import Session
from tests.builders import key_client, make_run

API = "/api/v1"
VICTIM_THREAD = "019a0000-0000-7000-8000-00000000beef"  # tenant B's, learnt somehow


def _request(tenant: str, session: str | None, run: str = "run-1") -> LaunchRequest:
    return LaunchRequest(
        intent_id="rdi_1",
        run_id=run,
        command_id="cmd_1",
        tenant_id=tenant,
        backend_profile="codex",
        runner_job_id="rjob_1",
        runner_id="runner_1",
        attempt_count=1,
        runner_key="ar_runner_x",
        api_url="http://127.0.0.1",
        session_id=session,
    )


def test_each_tenant_and_session_gets_its_own_private_codex_home(tmp_path: Path) -> None:
    with override_settings(AGENTRUN_DATA_DIR=tmp_path):
        mine = codex_home(_request("tenant-a", "sess-1"))
        again = codex_home(_request("tenant-a", "sess-1", run="run-2"))
        theirs = codex_home(_request("tenant-b", "sess-1"))
        lone = codex_home(_request("tenant-a", None, run="run-3"))
        odd = codex_home(_request("../tenant-b", "sess-1"))
    assert mine == again == tmp_path / "codex-homes" / "tenant-a" / "sess-1"
    assert theirs == tmp_path / "codex-homes" / "tenant-b" / "sess-1"
    assert lone == tmp_path / "codex-homes" / "tenant-a" / "run-3"
    assert odd.parent.parent == tmp_path / "codex-homes" and odd.parent.name.startswith("h-")
    for path in (mine, mine.parent, mine.parent.parent, theirs, lone):
        assert path.stat().st_mode & 0o777 == 0o700, path


def _turn(**session_ref: Any) -> dict[str, Any]:
    return {
        "project_id": "proj-1",
        "workspace_ref": {"path": "/work/repo"},
        "provider_id": "openai",
        "backend_profile": "scripted",
        "session_ref": {"session_id": "sess-mine", **session_ref},
    }


@pytest.mark.django_db
def test_a_client_cannot_hand_its_session_another_tenants_thread() -> None:
    client = key_client(role="client", tenant_id="tenant-a")
    upsert = {"project_id": "proj-1", "backend_profile": "codex", "thread_id": VICTIM_THREAD}
    routes = [
        ("put", "/sessions/sess-mine", upsert, "thread_id"),
        ("post", "/runs", _turn(thread_id=VICTIM_THREAD), "session_ref.thread_id"),
        (
            "post",
            "/queue/tasks",
            {**_turn(thread_id=VICTIM_THREAD), "title": "t", "payload": {"text": "go"}},
            "session_ref.thread_id",
        ),
    ]
    for method, path, body, field in routes:
        answer = getattr(client, method)(f"{API}{path}", body, format="json")
        assert answer.status_code == 400, (path, answer.json())
        assert answer.json()["error"]["details"]["field"] == field
    assert not Session.objects.filter(thread_id=VICTIM_THREAD).exists()


@pytest.mark.django_db
def test_the_thread_is_recorded_from_the_runners_report_and_an_upsert_keeps_it() -> None:
    run = make_run(tenant_id="tenant-a", session_ref={"session_id": "sess-mine", "metadata": {}})
    claim_run(run_id=run.id, runner_id="r1", lease_ms=60_000)
    finish_run(
        run_id=run.id,
        runner_id="r1",
        lease_epoch=1,
        result=TurnResult(terminal_status="completed", thread_id="thr-reported"),
    )
    client = key_client(role="client", tenant_id="tenant-a")
    body = {"project_id": run.project_id, "backend_profile": run.backend_profile}
    answer = client.put(f"{API}/sessions/sess-mine", body, format="json")
    assert answer.status_code == 200, answer.json()
    assert Session.objects.get(pk="sess-mine").thread_id == "thr-reported"
