"""Order and completeness under faults, with the relay in real Celery worker processes.

5,000 events over 50 sessions (two runs each, appended concurrently) go to 3 endpoints of
the tenant: A takes every type, B two types and answers 500 for its first seconds, C one
type and is stopped (nothing listens on its port) for its first seconds. The first relay
worker is SIGKILLed while it holds a claim, a second one drains the rest. Then:
- every endpoint received every matching event (its accepted requests, verified with the
  `standardwebhooks` library, cover exactly the matching events of the tenant);
- per (endpoint, session) the first arrivals follow the deliveries' order, and each run's
  events arrive in their seq order; any repeat is a retry of a `webhook-id` already sent.
The fault timings are seconds, not the issue's 20 s: the relay's behaviour (backoff, key
order, lease expiry) is the same, and the suite stays short.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone
from kombu.transport import sqlalchemy as kombu_sqla
from rest_framework.test import APIClient

from agentrun.task_queues import TaskName
from runs.models import Event, Run
from runs.services.event_log import NewEvent, append_runner_events
from tests.builders import key_client
from tests.faults.harness import Proc, celery_worker, send_task, wait_for
from tests.outbox.builders import RUNNER
from tests.outbox.processes import database_url_for_children
from tests.webhooks.helpers import register, session_run
from tests.webhooks.receiver import Received, Receiver
from webhooks.models import WebhookDelivery

pytestmark = pytest.mark.django_db(transaction=True)
EVENTS, SESSIONS = 5_000, 50
TYPES = ["log", "agent_message_delta", "reasoning"]
WORKER_ENV = {
    "AGENTRUN_WEBHOOK_ALLOW_PRIVATE": "true",
    "AGENTRUN_WEBHOOK_ALLOW_HTTP": "true",
    "AGENTRUN_WEBHOOK_WAKE_ON_COMMIT": "false",
    "AGENTRUN_WEBHOOK_LEASE_MS": "3000",
    "AGENTRUN_WEBHOOK_BACKOFF_BASE_MS": "100",
    "AGENTRUN_WEBHOOK_BACKOFF_CAP_MS": "800",
    "AGENTRUN_WEBHOOK_TIMEOUT_S": "1",
    "AGENTRUN_WEBHOOK_BATCH_SIZE": "300",
    "AGENTRUN_WEBHOOK_CONCURRENCY": "8",
}


def _broker() -> str:
    """The database broker on the test database: no shared Redis between engineers."""
    return "agentrun-sqla+postgresql+psycopg://" + database_url_for_children().partition("://")[2]


def _kick() -> None:
    send_task(_broker(), TaskName.WEBHOOK_RELAY_BATCH, "webhooks")


class _Kicker:
    """Kicks the relay at most every half second while a condition is polled: a batch that
    was not full (the writers are still writing) chains nothing, and beat is not running."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self) -> None:
        if time.monotonic() - self.last > 0.5:
            self.last = time.monotonic()
            _kick()


def _close_broker_engines() -> None:
    """kombu keeps one SQLAlchemy engine per broker URL for the process: close this test's,
    or its pooled connection keeps the test database from being dropped."""
    for url in [url for url in kombu_sqla.Channel._engines if url in _broker()]:
        kombu_sqla.Channel._engines.pop(url)[0].dispose()


def _write(runs: list[Run], seed: int, count: int) -> None:
    rng, written = random.Random(seed), 0
    try:
        while written < count:
            run, size = rng.choice(runs), min(rng.randint(1, 10), count - written)
            batch = [NewEvent(rng.choice(TYPES), {"n": written + i}) for i in range(size)]
            append_runner_events(
                run_id=run.id, runner_id=RUNNER, lease_epoch=run.lease_epoch, events=batch
            )
            written += size
    finally:
        connection.close()


def _leased_by(pid: int) -> int:
    return WebhookDelivery.objects.filter(
        delivered_at__isnull=True,
        lease_owner__contains=f":{pid}:",
        lease_expires_at__gt=timezone.now(),
    ).count()


def _kill_inside_a_batch(worker: Proc) -> int:
    """SIGKILL the worker while it holds a claim, after some deliveries went out; it is
    stopped first and its claim checked, so the kill cannot land just after a settle."""
    kick = _Kicker()
    for _ in range(100):
        wait_for(
            lambda: kick() is None
            and WebhookDelivery.objects.filter(delivered_at__isnull=False).count() > 500
            and _leased_by(worker.pid),
            120,  # deadlines are generous: the machine is shared and often loaded
            "the worker to be inside a batch after delivering some",
            0.002,
        )
        worker.signal(signal.SIGSTOP)
        held = _leased_by(worker.pid)
        if held:
            worker.kill()
            return held
        worker.signal(signal.SIGCONT)
    raise AssertionError("never caught the worker inside a batch")


def _drain(timeout: float) -> float:
    started = time.monotonic()
    while WebhookDelivery.objects.filter(delivered_at__isnull=True).exists():
        assert time.monotonic() - started < timeout, "deliveries still undelivered"
        _kick()  # a full batch chains the next; a kick covers retries coming due
        time.sleep(0.5)
    return time.monotonic() - started


def _check(receiver: Receiver, endpoint_id: str, types: set[str] | None) -> int:
    """Completeness and order for one endpoint; returns its number of repeats."""
    got = receiver.snapshot()
    assert all(r.verified for r in got), "a request failed the library's verification"
    matching = Event.objects.filter(run__tenant_id="tenant-a")
    if types is not None:
        matching = matching.filter(type__in=types)
    accepted = [r for r in got if r.answered == 200]
    first: dict[str, Received] = {}
    for r in accepted:
        first.setdefault(r.webhook_id, r)
    assert set(first) == set(matching.values_list("id", flat=True))
    order = {  # the deliveries' (commit) order of each key
        event_id: seq
        for event_id, seq in WebhookDelivery.objects.filter(
            endpoint_id=endpoint_id, replay_of__isnull=True
        ).values_list("event_id", "seq")
    }
    per_key: dict[str, list[Received]] = {}
    for r in first.values():
        per_key.setdefault(r.key, []).append(r)
    for key, items in per_key.items():
        seqs = [order[r.webhook_id] for r in items]
        assert seqs == sorted(seqs), f"{key}: out of order"
        last_seq: dict[str, int] = {}
        for r in items:
            run_id, seq = r.body["data"]["run_id"], r.body["data"]["seq"]
            assert seq > last_seq.get(run_id, 0), f"{run_id}: seq {seq} after {last_seq[run_id]}"
            last_seq[run_id] = seq
    return len(accepted) - len(first)


def test_every_endpoint_gets_every_matching_event_in_order_through_faults_and_a_kill(
    tmp_path: Path,
) -> None:
    client: APIClient = key_client(role="client", tenant_id="tenant-a")
    a, b, c = Receiver().start(), Receiver().start(), Receiver().start()
    made_a = register(client, a.url, ["*"])
    made_b = register(client, b.url, ["log", "agent_message_delta"])
    made_c = register(client, c.url, ["log"])
    a.secret, b.secret, c.secret = made_a["secret"], made_b["secret"], made_c["secret"]
    runs = [session_run(f"sess-{n % SESSIONS}") for n in range(2 * SESSIONS)]
    c.stop()  # C is down from the start (connection refused)
    c_down_at = time.monotonic()
    writers = [threading.Thread(target=_write, args=(runs, seed, EVENTS // 2)) for seed in (1, 2)]
    try:
        with celery_worker(
            "whrelay-a", queues="webhooks", broker=_broker(), data_dir=tmp_path, **WORKER_ENV
        ) as first:
            b.fail_until = time.monotonic() + 4  # B answers 500 for 4 s
            for writer in writers:
                writer.start()
            held = _kill_inside_a_batch(first)
        c_down_until = time.monotonic() + 1
        wait_for(lambda: time.monotonic() > c_down_until, 10, "C's outage to end")
        c.start()  # the same port again
        c_down_s = time.monotonic() - c_down_at
        for writer in writers:
            writer.join(timeout=180)
            assert not writer.is_alive(), "the writers did not finish"
        with celery_worker(
            "whrelay-b", queues="webhooks", broker=_broker(), data_dir=tmp_path, **WORKER_ENV
        ):
            took = _drain(timeout=180)
        repeats = [
            _check(a, made_a["id"], None),
            _check(b, made_b["id"], {"log", "agent_message_delta"}),
            _check(c, made_c["id"], {"log"}),
        ]
    finally:
        for receiver in (a, b, c):
            receiver.stop()
        _close_broker_engines()
    total = WebhookDelivery.objects.count()
    refused_b = sum(1 for r in b.snapshot() if r.answered == 500)
    print(
        f"\n{Event.objects.count()} events, {total} deliveries; killed holding {held}; "
        f"drained in {took:.1f}s after the kill; B answered 500 {refused_b} times; C was "
        f"down {c_down_s:.1f}s; "
        f"repeats (retries of a sent webhook-id) A/B/C {repeats}"
    )
    assert held > 0
