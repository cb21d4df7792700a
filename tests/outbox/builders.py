"""Builders of the outbox tests: outbox settings, claimed runs (alone or in a session) and
event batches, made through the real services."""

from __future__ import annotations

import random
import uuid

from django.db import connection
from pytest_django.fixtures import Settings as SettingsWrapper

from runs.locks import lock_run
from runs.models import Event, Run
from runs.services.event_log import NewEvent, append_events_locked, append_runner_events
from runs.services.lifecycle import claim_run
from tests.builders import make_run
from tests.support.kafka_broker import KafkaBroker

RUNNER = "runner-1"


def claimed_run(*, tenant_id: str = "tenant-a", session_id: str | None = None) -> Run:
    """A claimed run; with `session_id`, a run of that session (created on first use)."""
    session_ref = {"session_id": session_id} if session_id else None
    run = make_run(tenant_id=tenant_id, session_ref=session_ref)
    return claim_run(run_id=run.id, runner_id=RUNNER, lease_ms=600_000)


def append_logs(run: Run, count: int, *, start: int = 0) -> list[Event]:
    """Append `count` log events in one batch, as the run's runner."""
    events = [NewEvent("log", {"line": start + index}) for index in range(count)]
    return append_runner_events(
        run_id=run.id, runner_id=RUNNER, lease_epoch=run.lease_epoch, events=events
    )


def append_logs_in_open_transaction(run: Run, count: int, *, start: int = 0) -> list[Event]:
    """`append_logs` inside the caller's transaction: the run lock, then the locked append
    the runs services make (the public append is outermost and opens its own)."""
    events = [NewEvent("log", {"line": start + index}) for index in range(count)]
    return append_events_locked(run=lock_run(run.id), events=events, runner_id=RUNNER)


def writer(runs: list[Run], seed: int, count: int) -> int:
    """Append `count` events to random runs in batches of 1 to 10, as their runners do."""
    rng, written = random.Random(seed), 0
    try:
        while written < count:
            run, size = rng.choice(runs), min(rng.randint(1, 10), count - written)
            batch = [
                NewEvent("agent_message_delta", {"w": seed, "n": written + i}) for i in range(size)
            ]
            append_runner_events(
                run_id=run.id, runner_id=RUNNER, lease_epoch=run.lease_epoch, events=batch
            )
            written += size
    finally:
        connection.close()
    return written


def use_outbox(settings: SettingsWrapper, broker: KafkaBroker) -> str:
    """Turn the outbox on against `broker` with test-sized timings; returns the topic."""
    topic = f"agentrun.events.test-{uuid.uuid4().hex[:10]}"
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = broker.bootstrap_servers
    settings.AGENTRUN_KAFKA_TOPIC = topic
    settings.AGENTRUN_KAFKA_TOPIC_PARTITIONS = 6
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS = 8_000  # delivery reports within 4 s
    settings.AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS = 100
    settings.AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS = 800
    return topic
