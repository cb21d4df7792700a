"""Cell 14: webhook relay. Deliveries per second to a loopback receiver (issue 21).

The backlog: N deliveries of one endpoint over 50 sessions (one run each, events appended
through the services once, untimed); before each sample the deliveries are written again
in event order and the receiver is emptied. The receiver is a real HTTP server on
127.0.0.1 that verifies every request with `standardwebhooks` (tests/webhooks/receiver.py),
in a process of its own, as a receiver is another machine: its CPU is not the senders'.

agentrun: `relay_webhook_batch` in a loop until nothing is undelivered: a claim per batch
(each key's due prefix, SKIP LOCKED), the keys sent in parallel on C threads (each key in
order), one settle statement per batch.

Reference (a peer: the naive sender written here): C threads, each in a plain loop of one
transaction per delivery: take the oldest due delivery whose key has nothing earlier
pending (`FOR UPDATE SKIP LOCKED`), read its event, sign and send it with the same
`send_webhook` (the same requests: same headers, body, checks), mark it delivered, commit.
Both sides keep per-key order; the ledger reads the receiver back: every delivery's
`webhook-id` seen, duplicates, and per-session order violations.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agentrun.tenancy import Scope
from bench import fixtures
from bench.harness import CellReport, Figure, Ledger, Sample, Scale, compare
from outbox.cloudevents import cloud_event
from runs.models import Event
from runs.services.event_log import NewEvent, append_runner_events
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.sender import send_webhook, signed_headers
from webhooks.services.endpoints import create_endpoint, update_endpoint
from webhooks.services.relay import relay_webhook_batch
from webhooks.services.secrets import signing_secrets

SESSIONS = 50

_RESET = """
DELETE FROM agentrun_webhook_deliveries;
INSERT INTO agentrun_webhook_deliveries
  (endpoint_id, event_id, run_id, event_type, partition_key, attempt_count, last_response,
   last_error)
SELECT %(endpoint)s, e.id, e.run_id, e.type,
       r.tenant_id || ':' || (r.session_ref ->> 'session_id'), 0, '', ''
FROM agentrun_events e JOIN agentrun_runs r ON r.id = e.run_id
WHERE e.type = 'log' ORDER BY e.created_at, e.run_id, e.seq
"""

# The naive sender's claim: one head of a key at a time.
_NAIVE_CLAIM = """
SELECT d.seq, d.event_id FROM agentrun_webhook_deliveries d
WHERE d.delivered_at IS NULL AND NOT EXISTS (
  SELECT 1 FROM agentrun_webhook_deliveries earlier
  WHERE earlier.endpoint_id = d.endpoint_id AND earlier.partition_key = d.partition_key
    AND earlier.delivered_at IS NULL AND earlier.seq < d.seq)
ORDER BY d.seq LIMIT 1 FOR UPDATE SKIP LOCKED
"""


class ReceiverProcess:
    """`python -m tests.webhooks.receiver` in a child process, read back over HTTP."""

    def __init__(self, secret: str) -> None:
        argv = [sys.executable, "-m", "tests.webhooks.receiver", secret]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=settings.BASE_DIR)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/hook"

    def _call(self, method: str) -> bytes:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, "/")
            return connection.getresponse().read()
        finally:
            connection.close()

    def received(self) -> list[list[Any]]:
        return list(json.loads(self._call("GET")))

    def clear(self) -> None:
        self._call("DELETE")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _backlog(total: int) -> tuple[WebhookEndpoint, ReceiverProcess]:
    registered = create_endpoint(
        tenant_id=fixtures.BENCH_TENANT,
        url="http://127.0.0.1:9/",
        event_types=["log"],
        description="",
    )
    receiver = ReceiverProcess(registered.secret)  # its port is known once it runs
    try:
        return _fill(registered.endpoint.id, receiver, total), receiver
    except BaseException:
        receiver.stop()
        raise


def _fill(endpoint_id: str, receiver: ReceiverProcess, total: int) -> WebhookEndpoint:
    endpoint = update_endpoint(
        scope=Scope.operator(), endpoint_id=endpoint_id, changes={"url": receiver.url}
    )
    runs = fixtures.claimed_runs(SESSIONS)
    per_run = total // SESSIONS
    for run in runs:
        for start in range(0, per_run, 50):
            events = [NewEvent("log", {"n": start + i}) for i in range(min(50, per_run - start))]
            append_runner_events(
                run_id=run.run_id, runner_id=run.runner_id, lease_epoch=run.lease_epoch,
                events=events,
            )  # fmt: skip
    return endpoint


def _reset(endpoint: WebhookEndpoint, receiver: ReceiverProcess) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_RESET, {"endpoint": endpoint.id})
    receiver.clear()
    return WebhookDelivery.objects.count()


def _ledger(receiver: ReceiverProcess, expected: int) -> Ledger:
    got = receiver.received()
    first: set[str] = set()
    last: dict[str, int] = {}
    violations = unverified = 0
    for webhook_id, key, seq, answered, verified in got:
        unverified += not verified
        if webhook_id in first or answered != 200:
            continue
        first.add(webhook_id)
        violations += seq <= last.get(key, 0)
        last[key] = seq
    ledger = Ledger(expected, len(first), len(got) - len(first), expected - len(first), violations)
    ledger.extra["unverified"] = unverified
    return ledger


def _agentrun(endpoint: WebhookEndpoint, receiver: ReceiverProcess) -> Sample:
    expected = _reset(endpoint, receiver)
    began = time.perf_counter()
    while WebhookDelivery.objects.filter(delivered_at__isnull=True).exists():
        relay_webhook_batch()
    seconds = time.perf_counter() - began
    return Sample(expected, seconds, _ledger(receiver, expected))


def _naive_loop(endpoint: WebhookEndpoint, stop: threading.Event) -> None:
    secrets = signing_secrets(endpoint)
    try:
        while not stop.is_set():
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute(_NAIVE_CLAIM)
                    row = cursor.fetchone()
                if row is None:
                    return
                event = Event.objects.select_related("run").get(pk=row[1])
                key = f"{event.run.tenant_id}:{event.run.session_id}"
                envelope = cloud_event(run=event.run, event=event, partition_key=key, source="b")
                body = json.dumps(envelope, separators=(",", ":"))
                headers = signed_headers(secrets=secrets, msg_id=event.id, body=body)
                attempt = send_webhook(url=endpoint.url, body=body.encode(), headers=headers)
                if attempt.ok:
                    WebhookDelivery.objects.filter(pk=row[0]).update(delivered_at=event.created_at)
    finally:
        connection.close()


def _naive(endpoint: WebhookEndpoint, receiver: ReceiverProcess, threads: int) -> Sample:
    expected = _reset(endpoint, receiver)
    stop = threading.Event()
    began = time.perf_counter()
    while WebhookDelivery.objects.filter(delivered_at__isnull=True).exists():
        workers = [
            threading.Thread(target=_naive_loop, args=(endpoint, stop)) for _ in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    seconds = time.perf_counter() - began
    return Sample(expected, seconds, _ledger(receiver, expected))


def run(scale: Scale) -> CellReport:
    total, threads = scale.pick(1_000, 5_000), 8
    settings.AGENTRUN_WEBHOOK_ALLOW_PRIVATE = True
    settings.AGENTRUN_WEBHOOK_ALLOW_HTTP = True
    settings.AGENTRUN_WEBHOOK_WAKE_ON_COMMIT = False
    settings.AGENTRUN_WEBHOOK_CONCURRENCY = threads
    endpoint, receiver = _backlog(total)
    report = CellReport()
    try:
        report.outcomes.append(
            compare(
                Figure(
                    key="webhook_relay",
                    title="webhook deliveries/s to a loopback receiver, per-session order",
                    a_name="relay_webhook_batch",
                    a=lambda: _agentrun(endpoint, receiver),
                    b_name="naive per-delivery loop",
                    b=lambda: _naive(endpoint, receiver, threads),
                    params={"deliveries": total, "sessions": SESSIONS, "threads": threads},
                    unit="deliveries/s",
                ),
                repetitions=scale.heavy_reps,
            )
        )
    finally:
        receiver.stop()
    report.note("both sides: the same signed requests, the same receiver, 8 threads")
    return report
