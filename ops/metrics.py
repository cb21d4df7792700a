"""The `/metrics` view: this process's counters (`agentrun.metrics`) plus backlog gauges.

The backlog gauges are read from the database by `BacklogCollector`, from the same facts
as `agentrun_status` and the dashboard (`ops.status`), so the three never disagree. That
read spans every app, which is why the view lives here and not beside the counters in the
foundation. It is not done per scrape (issue 16: anyone could make the server query every
backlog as fast as they could send requests): a scrape serves the last reading, and one
older than `AGENTRUN_METRICS_BACKLOG_REFRESH_S` (default 10 s; 0 reads on every scrape)
starts one background refresh; only the very first scrape of a process waits for a read.

`/metrics` needs no API key, so no label carries a tenant, project, queue name or object id:
counts only. With `AGENTRUN_METRICS_TOKEN` set it needs `Authorization: Bearer <token>`.
With `PROMETHEUS_MULTIPROC_DIR` set, each scrape sums the counters of every process of the
host.
"""

from __future__ import annotations

import hmac
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agentrun import conf
from agentrun.metrics import REGISTRY
from dispatch.models import OPEN_INTENT_STATES
from ops.status import collect_status


def _refresh_s() -> float:
    return conf.metrics_backlog_refresh_s()


class _BacklogReading:
    """The last backlog reading of this process, refreshed at most every `_refresh_s()`
    seconds, in a background thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: dict[str, Any] | None = None
        self._read_at = 0.0
        self._refreshing = False

    def latest(self) -> dict[str, Any]:
        with self._lock:
            status, age = self._status, time.monotonic() - self._read_at
            stale = status is None or age >= _refresh_s()
            start = stale and status is not None and not self._refreshing and _refresh_s() > 0
            self._refreshing = self._refreshing or start
        if status is None or (stale and _refresh_s() <= 0):
            return self._read()
        if start:
            threading.Thread(target=self._refresh, name="metrics-backlog", daemon=True).start()
        return status

    def _read(self) -> dict[str, Any]:
        status = collect_status(items=0)
        with self._lock:
            self._status, self._read_at = status, time.monotonic()
        return status

    def _refresh(self) -> None:
        try:
            self._read()
        finally:
            self._refreshing = False
            connection.close()  # this thread's own connection


BACKLOG = _BacklogReading()


class BacklogCollector(Collector):
    """The backlog gauges from the last reading (`_BacklogReading`, `ops.status`)."""

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # nothing to read at registration; the database is only read on scrape

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield from _backlog_families(BACKLOG.latest())


def _family(name: str, doc: str, values: Mapping[str, Any], label: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], float(value or 0))
    return family


def _gauge(name: str, doc: str, value: Any) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=float(value or 0))


def _backlog_families(status: dict[str, Any]) -> Iterable[GaugeMetricFamily]:
    dispatch, outbox, queue = status["dispatch"], status["outbox"], status["queue"]
    intents = {state.value: dispatch[f"{state}_count"] for state in OPEN_INTENT_STATES}
    yield _family("agentrun_dispatch_open_intents", "Open intents by state.", intents, "state")
    yield _gauge("agentrun_dispatch_due_intents", "Intents due now.", dispatch["due_count"])
    yield _gauge(
        "agentrun_dispatch_oldest_open_age_seconds",
        "Age of the oldest open intent.",
        dispatch["oldest_pending_age_seconds"],
    )
    yield _gauge("agentrun_outbox_backlog", "Undelivered outbox records.", outbox["backlog"])
    yield _gauge(
        "agentrun_outbox_retrying", "Undelivered records tried before.", outbox["retrying"]
    )
    yield _gauge(
        "agentrun_outbox_oldest_pending_age_seconds",
        "Age of the oldest undelivered record.",
        outbox["oldest_pending_age_seconds"],
    )
    yield _family("agentrun_queue_tasks", "Queue tasks by state.", queue["by_state"], "state")
    yield _gauge(
        "agentrun_queue_oldest_pending_age_seconds",
        "Age of the oldest pending task.",
        queue["oldest_pending_age_seconds"],
    )
    yield from _webhook_families(status["webhooks"])
    yield from _run_families(status)


WEBHOOK_GAUGES = [  # (gauge, help, the status field)
    ("agentrun_webhook_backlog", "Undelivered webhook deliveries.", "backlog"),
    ("agentrun_webhook_retrying", "Undelivered deliveries tried before.", "retrying"),
    (
        "agentrun_webhook_oldest_pending_age_seconds",
        "Age of the oldest undelivered webhook delivery.",
        "oldest_pending_age_seconds",
    ),
    (
        "agentrun_webhook_failing_endpoints",
        "Enabled endpoints whose last attempts all failed.",
        "failing_count",
    ),
    ("agentrun_webhook_disabled_endpoints", "Disabled endpoints.", "disabled_count"),
]


def _webhook_families(webhooks: dict[str, Any]) -> Iterable[GaugeMetricFamily]:
    for name, doc, field in WEBHOOK_GAUGES:
        yield _gauge(name, doc, webhooks[field])


def _run_families(status: dict[str, Any]) -> Iterable[GaugeMetricFamily]:
    runs = status["runs"]
    yield _family("agentrun_runs_live", "Live runs by status.", runs["live"], "status")
    yield _gauge(
        "agentrun_runs_expired_leases", "Live runs whose lease expired.", runs["expired_leases"]
    )
    yield _gauge(
        "agentrun_sessions_running", "Sessions with a running turn.", status["sessions"]["running"]
    )
    yield _gauge(
        "agentrun_runners_stale",
        "Runners of live runs whose heartbeat is stale.",
        status["runners"]["stale_count"],
    )


def scrape_registry() -> CollectorRegistry:
    """This process's metrics, or with `PROMETHEUS_MULTIPROC_DIR` every process's of the
    host; both with the backlog gauges."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(BacklogCollector())
    return registry


def _token_accepted(request: HttpRequest) -> bool:
    """No `AGENTRUN_METRICS_TOKEN`: open; otherwise the bearer token must match it."""
    token = os.environ.get("AGENTRUN_METRICS_TOKEN", "")
    if not token:
        return True
    sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(sent.encode(), token.encode())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: Prometheus text format; counts only, no tenant data. Behind
    `AGENTRUN_METRICS_TOKEN` when it is set."""
    if not _token_accepted(request):
        response = HttpResponse("a metrics token is required\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="agentrun-metrics"'
        return response
    return HttpResponse(generate_latest(scrape_registry()), content_type=CONTENT_TYPE_LATEST)


# The foundation's registry cannot name this collector (it reads every app), so ops adds it,
# once: when the URLconf first imports this view, before any scrape.
REGISTRY.register(BacklogCollector())
