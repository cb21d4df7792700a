"""`/metrics`: scraped after known activity, it shows the numbers — and never a tenant, a
project or an object id, since it needs no key."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from pytest_django.fixtures import Settings as SettingsWrapper

from dispatch.services.launch import dispatch_batch
from outbox.kafka import discard_producer
from outbox.services.relay import relay_outbox_batch
from runs.models import Event
from runs.waiting import wait_for_event
from tests.builders import key_client, make_claimed_run
from tests.dispatch.helpers import FailingLauncher, RecordingLauncher, make_dispatch_command
from tests.ops.world import append_logs
from tests.outbox.builders import append_logs_in_open_transaction, use_outbox
from tests.support.kafka_broker import KafkaBroker, kafka_broker  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)
SECRET_TENANT = "tenant-secret-7f3a"
OBJECT_ID = re.compile(r"\b(run|cmd|evt|rdi|obx|qt|rjob)_[0-9A-Z]{16,}")


@pytest.fixture(autouse=True)
def _backlog_read_per_scrape(settings: SettingsWrapper) -> None:
    """These tests check the backlog right after making it: read it on every scrape."""
    settings.AGENTRUN_METRICS_BACKLOG_REFRESH_S = 0


def scrape(client: Client | None = None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `/metrics` (fetched without credentials), by name and labels."""
    response = (client or Client()).get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert SECRET_TENANT not in text and not OBJECT_ID.search(text)
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_events_are_counted_by_type_after_commit_only() -> None:
    before = scrape()
    run = make_claimed_run(tenant_id=SECRET_TENANT)
    append_logs(run, 3)
    with pytest.raises(RuntimeError), transaction.atomic():
        append_logs_in_open_transaction(run, 5)  # rolled back: never counted
        raise RuntimeError
    after = scrape()
    logs = "agentrun_events_appended_total"
    assert value(after, logs, type="log") - value(before, logs, type="log") == 3
    assert Event.objects.filter(run=run, type="log").count() == 3


def test_dispatch_outcomes_and_backlog_gauges(settings: SettingsWrapper) -> None:
    before = scrape()
    make_dispatch_command(tenant_id=SECRET_TENANT)
    dispatch_batch(launchers={"local": RecordingLauncher()})
    make_dispatch_command()
    dispatch_batch(launchers={"local": FailingLauncher()})
    settings.AGENTRUN_DISPATCH_MAX_ATTEMPTS = 1
    make_dispatch_command()
    dispatch_batch(launchers={"local": FailingLauncher()})
    make_dispatch_command()
    after = scrape()
    name = "agentrun_dispatch_intents_total"
    grown = {
        o: value(after, name, outcome=o) - value(before, name, outcome=o)
        for o in ("claimed", "dispatched", "retried", "failed")
    }
    assert grown == {"claimed": 3, "dispatched": 1, "retried": 1, "failed": 1}
    assert value(after, "agentrun_dispatch_open_intents", state="pending") == 1
    assert value(after, "agentrun_dispatch_open_intents", state="retry") == 1
    assert value(after, "agentrun_dispatch_due_intents") == 1
    assert value(after, "agentrun_runs_live", status="pending") == 3  # 1 launched, 2 waiting


@pytest.fixture
def outbox_on(settings: SettingsWrapper, kafka_broker: KafkaBroker) -> Iterator[None]:  # noqa: F811
    use_outbox(settings, kafka_broker)
    yield
    discard_producer()


def test_outbox_deliveries_retries_and_backlog(outbox_on: None, settings: SettingsWrapper) -> None:
    before = scrape()
    run = make_claimed_run(tenant_id=SECRET_TENANT)
    append_logs(run, 4)
    backlog = scrape()
    assert value(backlog, "agentrun_outbox_backlog") == 5  # run-claimed and 4 logs
    assert relay_outbox_batch().delivered == 5
    append_logs(run, 2)
    discard_producer()
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9"  # nobody listens there
    settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS = 2_000
    assert relay_outbox_batch().retried == 2
    after = scrape()
    name = "agentrun_outbox_records_total"
    assert value(after, name, outcome="delivered") - value(before, name, outcome="delivered") == 5
    assert value(after, name, outcome="retried") - value(before, name, outcome="retried") == 2
    assert value(after, "agentrun_outbox_backlog") == 2
    assert value(after, "agentrun_outbox_retrying") == 2


def test_request_latency_is_labelled_by_route_pattern_not_path() -> None:
    client = key_client(role="client", tenant_id=SECRET_TENANT)
    run = make_claimed_run(tenant_id=SECRET_TENANT)
    route = "api/v1/runs/<pk>"
    name = "agentrun_http_request_duration_seconds_count"
    before = scrape()
    for _ in range(3):
        assert client.get(f"/api/v1/runs/{run.id}").status_code == 200
    after = scrape()
    labels = {"method": "GET", "route": route, "status": "200"}
    assert value(after, name, **labels) - value(before, name, **labels) == 3
    assert value(after, name, method="GET", route="metrics", status="200") >= 1


def test_long_poll_waiters_are_counted_while_they_wait() -> None:
    run = make_claimed_run()
    waiter = threading.Thread(
        target=lambda: (
            wait_for_event(run_id=run.id, after_seq=99, timeout_s=3),
            connection.close(),
        )
    )
    waiter.start()
    deadline = time.monotonic() + 2
    while value(scrape(), "agentrun_long_poll_waiters") < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert value(scrape(), "agentrun_long_poll_waiters") == 1
    append_logs(run, 1)  # the waiter wakes up
    waiter.join(timeout=5)
    assert value(scrape(), "agentrun_long_poll_waiters") == 0
