"""The LISTEN pickup (issue 18): a real Celery worker, without beat and with the on-commit
Celery wake-up switched off on both sides, so no broker message can reach it; an intent
committed by the test is still claimed in milliseconds, by the worker's listener thread
(the trigger of dispatch migration 0003 notifies at commit). A burst of intents is
drained to the end by the same thread (it dispatches until a batch comes back short)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agentrun import pg_listen
from agentrun.pg_listen import ChannelListener
from dispatch.listener import DISPATCH_CHANNEL
from dispatch.models import RunnerDispatchIntent
from dispatch.tasks import dispatch_batch_task
from runs.models import Backend
from tests.dispatch.helpers import make_dispatch_command
from tests.dispatch.test_celery_worker import (
    _broker_url,
    _dispatched,
    _dispatcher,
    _purge,
    _wait,
    celery_worker,
)

LISTEN = {
    "AGENTRUN_DISPATCH_LISTEN": "true",
    "AGENTRUN_DISPATCH_WAKE_ON_COMMIT": "false",
    "AGENTRUN_EXTRA_LAUNCHERS": "recording=tests.dispatch.helpers.RecordingLauncher",
    "AGENTRUN_LAUNCH_PROFILES": '{"recording": {"launcher": "recording"}}',
    "AGENTRUN_DISPATCH_BATCH_SIZE": "5",
}


@pytest.mark.django_db(transaction=True)
@override_settings(AGENTRUN_DISPATCH_WAKE_ON_COMMIT=False)
def test_a_listening_worker_claims_a_committed_intent_without_the_broker(
    live_server: Any, tmp_path: Path
) -> None:
    broker = _broker_url()
    _purge(broker)
    Backend.objects.filter(profile="scripted").update(capacity={})
    with celery_worker(broker, live_server.url, tmp_path, LISTEN, beat=False) as log:
        _wait(lambda: b"dispatch listener started" in log.read_bytes(), 30, "the listener")
        one = make_dispatch_command(dispatch={"launch_profile": "recording"})
        committed = time.monotonic()
        intent = _wait(lambda: _dispatched(one), 10, "the notified intent to be dispatched")
        seen = time.monotonic() - committed
        latency = (intent.dispatched_at - intent.created_at).total_seconds()
        print(f"\nLISTEN pickup: created → dispatched {latency * 1000:.0f} ms (seen {seen:.2f} s)")
        assert _dispatcher(one).endswith(":listen")
        assert latency < 1.0

        burst = [make_dispatch_command(dispatch={"launch_profile": "recording"}) for _ in range(23)]
        _wait(
            lambda: RunnerDispatchIntent.objects.filter(state="dispatched").count() == 24,
            30,
            "the burst to drain",
        )
    triggers = Counter(_dispatcher(command).rsplit(":", 1)[1] for command in burst)
    assert triggers == {"listen": 23}, triggers


@pytest.mark.django_db(transaction=True)
def test_a_listening_worker_leaves_a_commit_wake_up_to_its_listener(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An insert's wake-up (`commit`) claims nothing in a worker whose listener holds its
    LISTEN (the same commit's notification woke the listener); a `due` wake-up (retry now,
    relaunch: an UPDATE, no NOTIFY) still dispatches, and so does `commit` once the
    listener has lost its connection."""
    settings.AGENTRUN_EXTRA_LAUNCHERS = {"recording": "tests.dispatch.helpers.RecordingLauncher"}
    settings.AGENTRUN_LAUNCH_PROFILES = {"recording": {"launcher": "recording"}}
    Backend.objects.filter(profile="scripted").update(capacity={})
    listener = ChannelListener(drains={DISPATCH_CHANNEL: lambda: None}, name="test-listener")
    listener.listening.set()  # as after its LISTEN (never started: no thread, no connection)
    monkeypatch.setattr(pg_listen, "_listener", listener)

    first, second = (make_dispatch_command(dispatch={"launch_profile": "recording"}) for _ in "ab")
    assert dispatch_batch_task("commit")["claimed"] == 0
    assert not _dispatched(first) and not _dispatched(second)
    assert dispatch_batch_task("due")["dispatched"] == 2
    third = make_dispatch_command(dispatch={"launch_profile": "recording"})
    listener.listening.clear()
    assert dispatch_batch_task("commit")["dispatched"] == 1
    assert _dispatcher(third).endswith(":commit")
