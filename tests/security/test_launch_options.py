"""Issue 16 finding 2, as the attack: a tenant chose the launcher and, for Kubernetes, the
image, the namespace (`kube-system`, where the runner key Secret was then written) and the
service account; an unknown launcher was accepted and retried five times.

Now a client's `dispatch` may only name one of the operator's launch profiles; anything
else, an unknown profile, or a profile naming an unknown launcher is a 400 at the API
and records nothing. What a launcher receives is the operator's profile.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from dispatch.models import RunnerDispatchIntent
from dispatch.services.launch import dispatch_batch
from runs.models import Run
from tests.builders import key_client, make_run
from tests.dispatch.helpers import RecordingLauncher, make_dispatch_command

API = "/api/v1"
HOSTILE = {
    "launcher": "kubernetes",
    "image": "attacker/miner:latest",
    "namespace": "kube-system",
    "service_account_name": "cluster-admin",
}
PROFILES = {"gpu": {"launcher": "kubernetes", "image": "ops/runner:1", "namespace": "agents"}}


def _turn(dispatch: dict[str, Any]) -> dict[str, Any]:
    return {"type": "turn", "payload": {"text": "go"}, "dispatch": dispatch}


def _refused(answer: Any, key: str) -> dict[str, Any]:
    assert answer.status_code == 400, answer.json()
    error: dict[str, Any] = answer.json()["error"]
    assert error["details"]["field"].endswith(f"dispatch.{key}"), error
    return error


@pytest.mark.django_db
@override_settings(AGENTRUN_LAUNCH_PROFILES=PROFILES)
def test_a_client_cannot_choose_launcher_image_namespace_or_service_account() -> None:
    run = make_run()
    client = key_client(role="client")
    answer = client.post(f"{API}/runs/{run.id}/commands", _turn(HOSTILE), format="json")
    error = _refused(answer, "image")  # the first of the refused keys, all listed
    assert set(error["details"]["errors"]["dispatch"]) == set(HOSTILE)
    assert not RunnerDispatchIntent.objects.filter(run=run).exists()


@pytest.mark.django_db
@override_settings(AGENTRUN_LAUNCH_PROFILES=PROFILES)
@pytest.mark.parametrize(
    "dispatch",
    [{"launch_profile": "no-such-profile"}, {"launch_profile": 7}],
)
def test_an_unknown_launch_profile_is_a_400_not_five_retries(dispatch: dict[str, Any]) -> None:
    run = make_run()
    client = key_client(role="client")
    answer = client.post(f"{API}/runs/{run.id}/commands", _turn(dispatch), format="json")
    _refused(answer, "launch_profile")
    assert not RunnerDispatchIntent.objects.filter(run=run).exists()


@pytest.mark.django_db
@override_settings(AGENTRUN_LAUNCH_PROFILES={"odd": {"launcher": "no-such-launcher"}})
def test_a_profile_naming_an_unknown_launcher_is_a_400() -> None:
    run = make_run()
    client = key_client(role="client")
    odd = _turn({"launch_profile": "odd"})
    _refused(client.post(f"{API}/runs/{run.id}/commands", odd, format="json"), "launch_profile")


@pytest.mark.django_db
def test_session_turns_and_queue_tasks_refuse_launch_options_too() -> None:
    client: APIClient = key_client(role="client", tenant_id="tenant-evil")
    run = {
        "project_id": "proj-1",
        "workspace_ref": {"path": "/work/repo"},
        "provider_id": "openai",
        "backend_profile": "scripted",
    }
    turn = {"run": run, "command": {"payload": {"text": "go"}, "dispatch": HOSTILE}}
    _refused(client.post(f"{API}/sessions/sess-k/turns", turn, format="json"), "image")
    task = {**run, "title": "t", "payload": {"text": "go"}, "dispatch": HOSTILE}
    _refused(client.post(f"{API}/queue/tasks", task, format="json"), "image")
    assert not Run.objects.filter(tenant_id="tenant-evil").exists()


@pytest.mark.django_db(transaction=True)
@override_settings(AGENTRUN_LAUNCH_PROFILES=PROFILES)
def test_the_launcher_gets_the_operators_profile_never_the_requests_options() -> None:
    # An intent recorded before this change (or by a service caller) still carries the
    # hostile keys: they are ignored; only the profile's values reach the launcher.
    named = make_dispatch_command(dispatch={"launch_profile": "gpu"})
    legacy = make_dispatch_command(dispatch=HOSTILE)
    kubernetes, local = RecordingLauncher(), RecordingLauncher()
    dispatch_batch(owner="w", launchers={"kubernetes": kubernetes, "local": local})
    (gpu,) = kubernetes.requests
    assert gpu.command_id == named.id
    assert gpu.profile == PROFILES["gpu"]
    (default,) = local.requests  # the legacy intent went to the default profile
    assert default.command_id == legacy.id and default.profile == {}
