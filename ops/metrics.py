"""The `/metrics` view: this process's counters (`agentrun.metrics`) plus backlog gauges.

The backlog gauges are read from the database at scrape time by `BacklogCollector`, from
the same facts as `agentrun_status` and the dashboard (`ops.status`), so the three never
disagree. That read spans every app, which is why the view lives here and not beside the
counters in the foundation.

`/metrics` needs no API key, so no label carries a tenant, project, queue name or object id:
counts only. With `PROMETHEUS_MULTIPROC_DIR` set, each scrape sums the counters of every
process of the host.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agentrun.metrics import REGISTRY
from dispatch.models import OPEN_INTENT_STATES
from ops.status import collect_status


class BacklogCollector(Collector):
    """Reads the backlogs from the database at scrape time (`ops.status`)."""

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # nothing to read at registration; the database is only read on scrape

    def collect(self) -> Iterable[GaugeMetricFamily]:
        status = collect_status(items=0)
        yield from _backlog_families(status)


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
    yield from _run_families(status)


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


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """`GET /metrics`: Prometheus text format. No API key: counts only, no tenant data."""
    return HttpResponse(generate_latest(scrape_registry()), content_type=CONTENT_TYPE_LATEST)


# The foundation's registry cannot name this collector (it reads every app), so ops adds it,
# once: when the URLconf first imports this view, before any scrape.
REGISTRY.register(BacklogCollector())
