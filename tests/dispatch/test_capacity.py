"""Capacity: a profile's `max_concurrent_runs`, enforced under the runner-create fence."""

from __future__ import annotations

import threading
import time

import pytest
from django.test import override_settings

from dispatch.launchers import LaunchRequest
from dispatch.models import RunnerDispatchIntent
from dispatch.services.launch import dispatch_batch
from runs.models import Event, Run
from runs.services.lifecycle import claim_run, finish_run
from runs.services.terminal import TurnResult
from tests.dispatch.helpers import RecordingLauncher, make_dispatch_command, set_capacity
from tests.runs.threads import race


class CapacityWatch:
    """Counts runs launched and not yet finished, at every launch."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.peak = 0
        self._lock = threading.Lock()

    def on_launch(self, request: LaunchRequest) -> None:
        with self._lock:
            self.running.add(request.run_id)
            self.peak = max(self.peak, len(self.running))

    def finish_one(self) -> None:
        run_id = sorted(self.running)[0]
        run = claim_run(run_id=run_id, runner_id="runner-x", lease_ms=60_000)
        finish_run(
            run_id=run_id,
            runner_id="runner-x",
            lease_epoch=run.lease_epoch,
            result=TurnResult("completed"),
        )
        with self._lock:
            self.running.discard(run_id)


@pytest.mark.django_db(transaction=True)
@override_settings(AGENTRUN_DISPATCH_CAPACITY_WAIT_MS=30)
def test_capacity_two_with_five_intents_never_runs_more_than_two() -> None:
    set_capacity("scripted", 2)
    commands = [make_dispatch_command() for _ in range(5)]
    watch = CapacityWatch()
    launcher = RecordingLauncher(on_launch=watch.on_launch)
    dispatched_after_round = []
    for _ in range(4):
        time.sleep(0.04)  # the deferred intents come due again
        race([lambda: dispatch_batch(launchers={"local": launcher}) for _ in range(3)])
        dispatched = RunnerDispatchIntent.objects.filter(state="dispatched").count()
        dispatched_after_round.append(dispatched)
        assert len(watch.running) <= 2
        if watch.running:
            watch.finish_one()
    assert watch.peak == 2
    assert dispatched_after_round == [2, 3, 4, 5]  # the rest went out as runs finished
    assert set(launcher.launches.values()) == {1} and len(launcher.launches) == 5
    intents = RunnerDispatchIntent.objects.filter(command__in=commands)
    assert set(intents.values_list("attempt_count", flat=True)) == {1}  # waits did not count
    assert not Event.objects.filter(payload__phase="runner-dispatch-retry").exists()
    assert not Run.objects.filter(status="failed").exists()


@pytest.mark.django_db(transaction=True)
@override_settings(AGENTRUN_DISPATCH_CAPACITY_WAIT_MS=60_000)
def test_an_intent_over_capacity_waits_pending_and_is_not_failed() -> None:
    set_capacity("scripted", 0)
    command = make_dispatch_command()
    counts = dispatch_batch(launchers={"local": RecordingLauncher()})
    assert (counts.claimed, counts.waiting, counts.dispatched) == (1, 1, 0)
    intent = RunnerDispatchIntent.objects.get(command=command)
    assert (intent.state, intent.attempt_count, intent.lease_owner) == ("pending", 0, None)
    assert intent.last_error == {
        "waiting": True,
        "reason": "capacity",
        "backend_profile": "scripted",
    }
    assert dispatch_batch(launchers={"local": RecordingLauncher()}).claimed == 0  # not due yet
