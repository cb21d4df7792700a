"""Fault: a Celery dispatch worker on RabbitMQ SIGKILLed mid-batch; the broker hands the
batch to another worker at once (issue 23).

The production broker settings (agentrun/settings.py): quorum queues, late acks, prefetch
1. Worker A takes a dispatch batch message, claims three intents, launches a real runner
for each and blocks completing them on a run row this test holds locked. Worker B idles on
the same queue. A is killed after its dispatch leases lapsed: its unacknowledged message
goes back to the queue when its connection drops and B receives that message (nothing
else sends one: no beat, no wake-ups) and redoes the batch, attempt 2, the fenced retry.
On Redis the message would wait for its visibility timeout (1 h by default) and the fault
test of the same kill (`test_dispatch_worker_killed.py`) has to
send a second one. Each run then completes once, with at most one runner job (a run one
of A's runners finished before B's claim is fenced, its intent `cancelled`).

The test uses a RabbitMQ virtual host of its own on the machine's broker (127.0.0.1:5672,
guest), deleted afterwards, so it shares no queue with anyone.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrun.models import ApiKey
from agentrun.task_queues import TaskName, TaskQueue
from dispatch.models import RunnerDispatchIntent
from runs.models import Event, RunnerJob
from tests.faults.harness import celery_worker, child_env, raw_connection, wait_for, waiting_on_lock
from tests.faults.invariants import assert_invariants
from tests.faults.test_dispatch_worker_killed import (
    RUNS,
    _all_terminal,
    _assert_dispatched_once,
    _dispatch_commands,
    _leases_lapsed,
    _worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture
def rabbitmq_vhost() -> Iterator[str]:
    """An amqp:// URL on a fresh virtual host of the machine's RabbitMQ."""
    vhost = f"agentrun-test-{secrets.token_hex(4)}"
    _rabbitmqctl("add_vhost", vhost)
    try:
        _rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    finally:
        _rabbitmqctl("delete_vhost", vhost)


def _send_dispatch_batch(broker: str, data_dir: Path) -> None:
    """Publish from a child with the production settings for this broker (the queue is
    declared as the workers declare it: a quorum queue)."""
    code = (
        "import django; django.setup(); from agentrun.celery import app; import sys; "
        "app.send_task(sys.argv[1], kwargs={'trigger': 'commit'}, queue=sys.argv[2])"
    )
    env = child_env(data_dir, "fault-rmq-sender", CELERY_BROKER_URL=broker)
    subprocess.run(
        [sys.executable, "-c", code, TaskName.DISPATCH_BATCH.value, TaskQueue.DISPATCH.value],
        env=env,
        check=True,
        timeout=60,
    )


def test_worker_killed_mid_batch_on_rabbitmq_is_redone_at_once_by_another(
    live_server: Any, tmp_path: Path, rabbitmq_vhost: str
) -> None:
    run_ids = _dispatch_commands()
    blocker = raw_connection("fault-rmq-blocker")
    try:
        _kill_mid_batch_and_redo(live_server, tmp_path, rabbitmq_vhost, blocker, run_ids)
    finally:
        _release(blocker)  # a failure above must not leave the run row locked


def _release(blocker: Any) -> None:
    if not blocker.closed:
        blocker.rollback()
        blocker.close()


def _kill_mid_batch_and_redo(
    live_server: Any, tmp_path: Path, broker: str, blocker: Any, run_ids: list[str]
) -> None:
    blocker.execute("BEGIN")
    blocker.execute("SELECT 1 FROM agentrun_runs WHERE id = %s FOR UPDATE", [run_ids[0]])
    # The batch must come through the broker (its late ack is what is tested), so the
    # workers' LISTEN pickup (issue 18) stays off: it would claim the intents in-process.
    env = {
        **_worker_env(live_server),
        "AGENTRUN_DISPATCH_LEASE_MS": "1500",
        "AGENTRUN_DISPATCH_LISTEN": "false",
    }
    queue = TaskQueue.DISPATCH.value
    with celery_worker("rmq-a", queues=queue, broker=broker, data_dir=tmp_path, **env) as first:
        assert _queue(broker)["type"] == "quorum"
        _send_dispatch_batch(broker, tmp_path)
        keys = ApiKey.objects.filter(name__startswith="runner job")
        wait_for(lambda: keys.count() == RUNS, 30, "worker A to launch every runner")
        wait_for(lambda: waiting_on_lock(first.app_name), 30, "worker A's completion to block")
        # Late ack: the message A is working on is still the broker's, unacknowledged (a
        # quorum queue's counters may lag a moment behind).
        wait_for(lambda: _counts(broker) == ("0", "1"), 20, "1 unacknowledged message", 0.2)
        with celery_worker("rmq-b", queues=queue, broker=broker, data_dir=tmp_path, **env) as b:
            wait_for(_leases_lapsed, 10, "worker A's dispatch leases to lapse", 0.1)
            killed = time.monotonic()
            first.kill()  # mid-batch: launched, not recorded, message not acknowledged
            _release(blocker)
            settled = RunnerDispatchIntent.objects.filter(
                run_id__in=run_ids, state__in=["dispatched", "cancelled"]
            )
            wait_for(lambda: settled.count() == RUNS, 30, "worker B to redo the batch", 0.05)
            redone_s = time.monotonic() - killed
            wait_for(lambda: _all_terminal(run_ids), 90, "every run to finish", 0.2)
            b_pid = b.pid
        wait_for(lambda: _counts(broker) == ("0", "0"), 20, "B to acknowledge it", 0.2)
    print(
        f"\nthe killed worker's batch was redone by the other worker {redone_s:.2f}s after the kill"
    )
    events = Event.objects.filter(run_id__in=run_ids, payload__phase="runner-dispatched")
    assert {event.payload["dispatcher"].split(":")[1] for event in events} == {str(b_pid)}
    # The locked run's runner could not claim it, so its intent was surely redone (attempt
    # 2, the fenced retry); a run another runner of A finished meanwhile is fenced instead.
    blocked = RunnerDispatchIntent.objects.get(run_id=run_ids[0])
    assert (blocked.state, blocked.attempt_count) == ("dispatched", 2)
    assert RunnerJob.objects.filter(run_id__in=run_ids).count() == events.count() >= 1
    _assert_dispatched_once(run_ids)
    assert_invariants()


def _counts(broker: str) -> tuple[str, str]:
    queue = _queue(broker)
    return queue["ready"], queue["unacked"]


def _queue(broker: str) -> dict[str, str]:
    """The dispatch queue as RabbitMQ reports it: type, ready and unacknowledged counts."""
    done = subprocess.run(
        [
            *("rabbitmqctl", "-q", "list_queues", "-p", broker.rsplit("/", 1)[1]),
            *("--no-table-headers", "name", "type", "messages_ready", "messages_unacknowledged"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for line in done.stdout.splitlines():
        name, kind, ready, unacked = line.split()
        if name == TaskQueue.DISPATCH.value:
            return {"type": kind, "ready": ready, "unacked": unacked}
    raise AssertionError(f"no dispatch queue in {done.stdout!r}")
