"""A dispatch task runs the follow-ups of its full batches in-process (issue 18, the
Celery drain of bench cell 3): a burst is drained by the task one wake-up started, with
no broker message between its batches, until `FOLLOW_UP_BUDGET_S` is spent; then the
rest of the burst goes through the broker, as every follow-up did before."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from dispatch import tasks
from dispatch.models import RunnerDispatchIntent
from dispatch.tasks import dispatch_batch_task
from dispatch.wakeup import wake_dispatcher
from runs.models import Backend, RunnerJob
from tests.dispatch.helpers import celery_broker, make_dispatch_command
from tests.dispatch.test_celery_worker import _broker_url, _dispatcher, _purge, _wait, celery_worker

RECORDING = {"launch_profile": "recording"}


def _received(log: Path) -> int:
    """The dispatch task messages the worker took from the broker."""
    return len(re.findall(rb"Task dispatch\.dispatch_batch\[[^\]]+\] received", log.read_bytes()))


@pytest.mark.django_db(transaction=True)
def test_one_wake_up_drains_a_burst_in_one_task_without_broker_follow_ups(
    live_server: Any, tmp_path: Path
) -> None:
    """30 intents, batches of 5, one wake-up, no beat, no LISTEN: one task message is
    received and its six full batches and the short seventh run in that task."""
    broker = _broker_url()
    _purge(broker)
    Backend.objects.filter(profile="scripted").update(capacity={})
    with override_settings(AGENTRUN_DISPATCH_WAKE_ON_COMMIT=False):
        burst = [make_dispatch_command(dispatch=RECORDING) for _ in range(30)]
    extra = {
        "AGENTRUN_EXTRA_LAUNCHERS": "recording=tests.dispatch.helpers.RecordingLauncher",
        "AGENTRUN_LAUNCH_PROFILES": '{"recording": {"launcher": "recording"}}',
        "AGENTRUN_DISPATCH_BATCH_SIZE": "5",
        "AGENTRUN_DB_APPLICATION_NAME": f"follow-up-worker-{os.getpid()}",
    }
    with (
        celery_worker(broker, live_server.url, tmp_path, extra, beat=False) as log,
        celery_broker(broker),
    ):
        wake_dispatcher()
        _wait(
            lambda: RunnerDispatchIntent.objects.filter(state="dispatched").count() == 30,
            30,
            "the burst to drain",
        )
        _wait(lambda: b"succeeded" in log.read_bytes(), 10, "the task to end")
        assert _received(log) == 1
    triggers = Counter(_dispatcher(command).rsplit(":", 1)[1] for command in burst)
    assert triggers == {"commit": 5, "continue": 25}, triggers
    assert RunnerJob.objects.count() == 30


@pytest.mark.django_db(transaction=True)
def test_a_spent_budget_hands_the_burst_back_to_the_broker(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the budget spent after the first batch, the task runs one batch and queues
    one `continue` follow-up; with time left, it runs the follow-ups itself and returns
    the batches' counts summed."""
    settings.AGENTRUN_EXTRA_LAUNCHERS = {"recording": "tests.dispatch.helpers.RecordingLauncher"}
    settings.AGENTRUN_LAUNCH_PROFILES = {"recording": {"launcher": "recording"}}
    settings.AGENTRUN_DISPATCH_BATCH_SIZE = 5
    settings.AGENTRUN_DISPATCH_WAKE_ON_COMMIT = False
    Backend.objects.filter(profile="scripted").update(capacity={})
    queued: list[str] = []
    monkeypatch.setattr(tasks, "continue_dispatch", lambda: queued.append("continue"))
    burst = [make_dispatch_command(dispatch=RECORDING) for _ in range(12)]

    monkeypatch.setattr(tasks, "FOLLOW_UP_BUDGET_S", 0.0)
    assert dispatch_batch_task("beat")["dispatched"] == 5
    assert queued == ["continue"]

    monkeypatch.setattr(tasks, "FOLLOW_UP_BUDGET_S", 60.0)
    counts = dispatch_batch_task("beat")
    assert (counts["claimed"], counts["dispatched"]) == (7, 7)  # a full batch, then 2
    assert queued == ["continue"]
    triggers = Counter(_dispatcher(command).rsplit(":", 1)[1] for command in burst)
    assert triggers == {"beat": 10, "continue": 2}, triggers
