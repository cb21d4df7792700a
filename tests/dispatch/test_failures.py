"""A launcher that always fails: retries with growing, jittered delays, then the seed's
terminalisation (intent, command and run failed, with its events)."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings
from django.utils import timezone

from agentrun.models import ApiKey
from dispatch.services.launch import dispatch_batch
from runs.models import Event
from tests.dispatch.helpers import FailingLauncher, intent_of, make_dispatch_command, phases


@pytest.mark.django_db(transaction=True)
@override_settings(
    AGENTRUN_DISPATCH_BACKOFF_BASE_MS=100,
    AGENTRUN_DISPATCH_BACKOFF_CAP_MS=10_000,
    AGENTRUN_DISPATCH_MAX_ATTEMPTS=4,
)
def test_an_always_failing_launcher_retries_with_growing_delays_then_fails_the_run() -> None:
    command = make_dispatch_command()
    launcher = FailingLauncher()
    results = []
    for _ in range(4):
        _sleep_until_due(command)
        results.append(dispatch_batch(owner="w", launchers={"local": launcher}).as_dict())
    assert [(r["claimed"], r["retried"], r["failed"]) for r in results] == [
        (1, 1, 0),
        (1, 1, 0),
        (1, 1, 0),
        (1, 0, 1),
    ]
    intent = intent_of(command)
    assert launcher.launches == {intent.id: 4}
    retries = Event.objects.filter(run=command.run_id, payload__phase="runner-dispatch-retry")
    delays = [e.payload["delay_ms"] for e in retries.order_by("seq")]
    assert len(delays) == 3 and delays == sorted(delays) and delays[-1] > delays[0]
    assert retries.first().payload["error"]["message"] == "the cluster refused the job"
    assert (intent.state, intent.attempt_count, intent.lease_owner) == ("failed", 4, None)
    command.refresh_from_db()
    command.run.refresh_from_db()
    assert command.state == "failed"
    assert (command.run.status, command.run.failure_kind) == ("failed", "infra-failed")
    assert command.run.failure_message == "the cluster refused the job"
    assert phases(command.run_id)[-3:] == [
        "runner-dispatch-failed",
        "command-terminal",
        "terminal_status",
    ]
    failed = Event.objects.get(run=command.run_id, payload__phase="runner-dispatch-failed")
    assert failed.payload["attempt_count"] == 4 and failed.payload["values_printed"] is False
    keys = ApiKey.objects.filter(role="runner", run_id=command.run_id)
    assert keys.count() == 4 and not keys.filter(revoked_at__isnull=True).exists()
    print(f"\nretry delays (ms): {delays}")


@pytest.mark.django_db(transaction=True)
def test_an_unknown_launcher_name_fails_visibly_through_the_same_path() -> None:
    # The API refuses such a profile with a 400; one configured after the intent was
    # recorded still fails the intent visibly.
    command = make_dispatch_command(dispatch={"launch_profile": "odd"})
    profiles = {"odd": {"launcher": "no-such-launcher"}}
    with override_settings(AGENTRUN_DISPATCH_MAX_ATTEMPTS=1, AGENTRUN_LAUNCH_PROFILES=profiles):
        counts = dispatch_batch(owner="w", launchers={"local": FailingLauncher()})
    assert (counts.claimed, counts.failed) == (1, 1)
    assert "unknown launcher" in (intent_of(command).last_error or {})["message"]


def _sleep_until_due(command: object) -> None:
    due = intent_of(command).next_attempt_at  # type: ignore[arg-type]
    wait = (due - timezone.now()).total_seconds()
    if wait > 0:
        time.sleep(wait + 0.005)
