"""The append skips the webhook-delivery INSERT … SELECT when no endpoint could match, and
that check never loses a delivery for an endpoint created while appends run.

The check is a column of the event statement (`runs.sql.insert_events`): whether any
enabled endpoint of the runs' tenants takes one of the batch's types, read in that
statement's snapshot. An append that starts after an endpoint's creation returned must
therefore deliver to it; the race test creates endpoints from one thread while writer
threads append, and checks exactly that, without any sleep or timing assumption.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings as SettingsWrapper

from runs.models import Event, Run
from runs.services.event_log import NewEvent, append_runner_events
from tests.outbox.builders import RUNNER, append_logs, claimed_run
from tests.runs.threads import race
from webhooks.models import WebhookDelivery, WebhookEndpoint
from webhooks.services.endpoints import create_endpoint

pytestmark = pytest.mark.django_db(transaction=True)

TENANT = "tenant-hooks"


@pytest.fixture(autouse=True)
def webhook_settings(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_WEBHOOK_ALLOW_PRIVATE = True
    settings.AGENTRUN_WEBHOOK_ALLOW_HTTP = True
    settings.AGENTRUN_WEBHOOK_WAKE_ON_COMMIT = False
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = ""


def endpoint(event_types: list[str], tenant_id: str = TENANT) -> str:
    registered = create_endpoint(
        tenant_id=tenant_id, url="http://127.0.0.1:9/hook", event_types=event_types, description=""
    )
    return registered.endpoint.id


def statements_of_append(run: Run) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        append_logs(run, 2)
    return [query["sql"] for query in captured.captured_queries]


def test_no_matching_endpoint_skips_the_delivery_statement() -> None:
    run = claimed_run(tenant_id=TENANT)
    endpoint(["agent_message"])  # of the tenant, but not for `log`
    endpoint(["*"], tenant_id="tenant-other")  # matches every type, of another tenant
    sqls = statements_of_append(run)
    assert len(sqls) == 5, sqls
    assert not any("agentrun_webhook_deliveries" in sql for sql in sqls)
    assert not WebhookDelivery.objects.exists()


@pytest.mark.parametrize("event_types", [["log"], ["*"]])
def test_a_matching_endpoint_gets_its_delivery_statement(event_types: list[str]) -> None:
    run = claimed_run(tenant_id=TENANT)
    endpoint_id = endpoint(event_types)
    sqls = statements_of_append(run)
    assert len(sqls) == 6, sqls
    assert "agentrun_webhook_deliveries" in sqls[3]
    assert WebhookDelivery.objects.filter(endpoint_id=endpoint_id).count() == 2


def test_a_disabled_endpoint_does_not_count() -> None:
    run = claimed_run(tenant_id=TENANT)
    endpoint_id = endpoint(["*"])
    WebhookEndpoint.objects.filter(pk=endpoint_id).update(enabled=False)
    assert len(statements_of_append(run)) == 5


WRITERS, ENDPOINTS, AFTER_EACH = 3, 3, 6


def test_endpoints_created_during_appends_get_every_later_event() -> None:
    """Writers append single events; a creator registers endpoints one after another, each
    once every writer has appended since the previous one. Each append records which
    endpoints had been created (their creation returned) before it started: every event
    must have a delivery for each of them."""
    runs = [claimed_run(tenant_id=TENANT, session_id="s-hooks" if i else None) for i in range(2)]
    runs.append(claimed_run(tenant_id=TENANT))
    created: list[str] = []  # appended to only after `create_endpoint` returned
    lock = threading.Condition()
    appends_since = [0] * WRITERS  # per writer, appends since the last creation
    done = threading.Event()
    known_at_start: dict[str, list[str]] = {}  # event id -> endpoints created before

    def writer(index: int) -> int:
        run, made = runs[index], 0
        while not done.is_set():
            with lock:
                before = list(created)
            events = append_runner_events(
                run_id=run.id,
                runner_id=RUNNER,
                lease_epoch=run.lease_epoch,
                events=[NewEvent("log", {"w": index, "n": made})],
            )
            made += 1
            with lock:
                known_at_start[events[0].id] = before
                appends_since[index] += 1
                lock.notify_all()
        return made

    def creator() -> int:
        try:
            for _ in range(ENDPOINTS + 1):
                with lock:
                    assert lock.wait_for(lambda: min(appends_since) >= AFTER_EACH, timeout=60)
                    appends_since[:] = [0] * WRITERS
                if len(created) == ENDPOINTS:
                    break  # the last endpoint has had AFTER_EACH appends per writer
                new = endpoint(["log"])
                with lock:
                    created.append(new)
            return len(created)
        finally:
            done.set()

    results: list[Any] = race([creator, *(lambda i=i: writer(i) for i in range(WRITERS))])
    assert not [r for r in results if isinstance(r, Exception)], results
    assert results[0] == ENDPOINTS

    delivered = set(WebhookDelivery.objects.values_list("event_id", "endpoint_id"))
    missing = [
        (event_id, endpoint_id)
        for event_id, endpoints in known_at_start.items()
        for endpoint_id in endpoints
        if (event_id, endpoint_id) not in delivered
    ]
    assert not missing, missing
    assert sum(len(endpoints) for endpoints in known_at_start.values()) >= ENDPOINTS * AFTER_EACH
    assert Event.objects.filter(run__in=runs, type="log").count() == len(known_at_start)
    assert WebhookDelivery.objects.count() == len(delivered)
