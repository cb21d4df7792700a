"""Seed fidelity of runner dispatch (issue 17 items 5 and 7): the dispatch-failure terminal
names its reason, and a command's dispatch intent shows its error and outcome fields."""

from __future__ import annotations

import pytest
from django.test import override_settings

from dispatch.services.launch import dispatch_batch
from runs.models import Event
from tests.api.helpers import call
from tests.builders import key_client
from tests.dispatch.helpers import FailingLauncher, RecordingLauncher, make_dispatch_command


@pytest.mark.django_db(transaction=True)
@override_settings(AGENTRUN_DISPATCH_MAX_ATTEMPTS=1)
def test_a_dispatch_failures_terminal_status_carries_its_reason_and_the_intent_its_error() -> None:
    command = make_dispatch_command()
    assert dispatch_batch(owner="w", launchers={"local": FailingLauncher()}).failed == 1
    terminal = Event.objects.get(run_id=command.run_id, type="terminal_status")
    failed = Event.objects.get(run_id=command.run_id, payload__phase="runner-dispatch-failed")
    assert terminal.payload["reason"] == failed.payload["reason"] == "launch-failed"
    shown = call(key_client(role="client"), "GET", f"/commands/{command.id}").json()
    intent = shown["dispatch_intent"]
    assert intent["state"] == "failed"
    assert intent["last_error"]["message"] == "the cluster refused the job"
    assert (intent["dispatch_outcome"], intent["actual_runner_job_id"]) == (None, None)


@pytest.mark.django_db(transaction=True)
def test_a_dispatched_intent_shows_its_outcome_job_and_runner() -> None:
    command = make_dispatch_command()
    assert dispatch_batch(owner="w", launchers={"local": RecordingLauncher()}).dispatched == 1
    intent = call(key_client(role="client"), "GET", f"/commands/{command.id}").json()[
        "dispatch_intent"
    ]
    assert intent["state"] == "dispatched" and intent["last_error"] is None
    assert intent["actual_runner_job_id"] == intent["runner_job_id"]  # item 6: one id
    assert intent["active_runner_id"] and intent["dispatched_at"]
    assert intent["dispatch_outcome"] == "launched"
