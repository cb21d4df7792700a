"""Fault: a relay worker frozen (SIGSTOP) past its lease while another takes over, then
resumed (SIGCONT).

The frozen Celery worker holds a claimed batch. After its lease lapses a `relay_outbox
--loop` process claims those records again (attempt 2) and delivers them. When the first
worker resumes, it finishes producing its old batch (duplicates on the wire, deduped by
event id) and tries to mark it delivered: every completion is refused by the fence (lease
owner, attempt count, live lease) and the refusal is logged. Stale completions accepted: 0.

The relay pipelines (it claims the next batch while the last one settles), so the frozen
worker may hold one batch or two: the test counts what it held and sums every late settle.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from agentrun.task_queues import TaskName
from outbox.models import KafkaEventOutbox
from tests.faults.harness import (
    REDIS_OUTBOX,
    celery_worker,
    child_env,
    manage,
    process,
    purge,
    send_task,
    wait_for,
)
from tests.faults.invariants import assert_invariants
from tests.faults.outbox_load import (
    fill_backlog,
    leased_by_pid,
    outbox_runs,
    read_back,
    undelivered,
)
from tests.outbox.builders import use_outbox
from tests.outbox.kafka_reader import KafkaReader
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)
SETTLED = re.compile(
    r"settled with problems: Settled\(delivered=(\d+), retried=(\d+), refused=(\d+)"
)


def _late_settles(log: str) -> tuple[int, int, int]:
    """(delivered, retried, refused) summed over every settle the worker logged."""
    counts = [tuple(int(n) for n in m.groups()) for m in SETTLED.finditer(log)]
    return tuple(sum(c[i] for c in counts) for i in range(3))  # type: ignore[return-value]


def _freeze_inside_a_batch(worker_pid: int, signal_group: object) -> list[str]:
    """SIGSTOP the worker while it holds a claim; returns the ids it holds."""
    for _ in range(20):
        wait_for(lambda: leased_by_pid(worker_pid), 60, "the worker to claim a batch", 0.001)
        signal_group(signal.SIGSTOP)  # type: ignore[operator]
        held = KafkaEventOutbox.objects.filter(
            delivered_at__isnull=True, lease_owner__contains=f":{worker_pid}:"
        )
        ids = list(held.values_list("id", flat=True))
        if ids:
            return ids
        signal_group(signal.SIGCONT)  # type: ignore[operator]  # it settled meanwhile: again
    raise AssertionError("never froze the worker inside a batch")


def test_worker_stopped_past_its_lease_then_resumed(
    settings: SettingsWrapper, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = use_outbox(settings, kafka_broker)
    settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS = 3_000
    fill_backlog(outbox_runs("f9"), 1_500)
    purge(REDIS_OUTBOX)
    env = {"AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE": "50"}
    with KafkaReader(kafka_broker.bootstrap_servers, topic) as reader:
        with celery_worker(
            "relay-frozen", queues="outbox", broker=REDIS_OUTBOX, data_dir=tmp_path, **env
        ) as frozen:
            send_task(REDIS_OUTBOX, TaskName.RELAY_BATCH, "outbox")
            held = _freeze_inside_a_batch(frozen.pid, frozen.signal)
            stopped_at = time.monotonic()
            loop_env = child_env(tmp_path, "fault-relay-loop", **env)
            argv = manage("relay_outbox", "--loop", "--idle-seconds", "0.05")
            with process(argv, loop_env, tmp_path / "loop.log", "fault-relay-loop"):
                wait_for(lambda: undelivered() == 0, 60, "the other relay to take over", 0.05)
            taken = KafkaEventOutbox.objects.filter(id__in=held)
            assert all(r.delivered_at and r.attempt_count == 2 for r in taken)
            frozen_for = time.monotonic() - stopped_at
            frozen.signal(signal.SIGCONT)
            wait_for(
                lambda: sum(_late_settles(frozen.text())) >= len(held),
                30,
                f"the late settles of the {len(held)} records it held",
            )
        delivered, retried, refused = _late_settles(frozen.text())
        events, duplicates = read_back(reader)
    print(
        f"\nrelay frozen {frozen_for:.1f}s holding {len(held)} records (lease 3 s); taken over "
        f"and delivered by another relay; on resume: {refused} completions refused, "
        f"{delivered + retried} accepted (stale completions accepted: {delivered + retried}); "
        f"{events} events read in key order, {duplicates} duplicates"
    )
    assert (delivered, retried, refused) == (0, 0, len(held))
    assert_invariants(outbox=True)
