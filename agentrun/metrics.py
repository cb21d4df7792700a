"""Prometheus counters and the route-latency middleware: what each process counts.

- Counters: events appended (by type), dispatch intents by outcome (claimed, dispatched,
  retried, failed, waiting, fenced), outbox records by outcome (delivered, retried,
  refused), tokens runners reported (by backend profile and kind). Each is incremented
  only once its work committed: events through `transaction.on_commit`, dispatch and relay
  batches after their last transaction, tokens after their append.
- `agentrun_http_request_duration_seconds` by method, route *pattern* and status code (the
  resolved pattern, never the raw path: an id in a label would make a series per object
  and name other tenants' objects).
- `agentrun_long_poll_waiters`: event long-polls waiting right now.

This module is foundation: the services of every app count through it, so it imports no
app. The `/metrics` view and the backlog gauges, which read every app's tables at scrape
time, are `ops.metrics`.

`/metrics` needs no API key, so no label carries a tenant, project, queue name or object id:
counts only. Counters live in the process that did the work; set `PROMETHEUS_MULTIPROC_DIR`
(a directory shared by the API and worker processes of a host) and each scrape sums them.
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Iterable, Mapping

from django.db import transaction
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()
_REGEX_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Long-polls last up to 30 s, so the buckets reach past it.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

REQUEST_LATENCY = Histogram(
    "agentrun_http_request_duration_seconds",
    "HTTP request latency by method, route pattern and status code.",
    ["method", "route", "status"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
EVENTS_APPENDED = Counter(
    "agentrun_events_appended", "Run events committed, by type.", ["type"], registry=REGISTRY
)
DISPATCH_INTENTS = Counter(
    "agentrun_dispatch_intents",
    "Dispatch intent claims and their outcomes (claimed, dispatched, retried, failed, "
    "waiting, fenced).",
    ["outcome"],
    registry=REGISTRY,
)
OUTBOX_RECORDS = Counter(
    "agentrun_outbox_records",
    "Outbox records settled by the relay, by outcome (delivered, retried, refused).",
    ["outcome"],
    registry=REGISTRY,
)
STREAMS_OPEN = Gauge(
    "agentrun_streams_open",
    "Server-Sent Events streams open now (run and session streams).",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)
# Per backend profile only: a tenant label would name tenants on an unauthenticated page.
TOKENS_USED = Counter(
    "agentrun_tokens",
    "Tokens reported by runners' token_usage events, by backend profile and kind (input, "
    "cached_input, output, reasoning, total).",
    ["backend_profile", "kind"],
    registry=REGISTRY,
)
LONG_POLL_WAITERS = Gauge(
    "agentrun_long_poll_waiters",
    "Event long-polls waiting now.",
    registry=REGISTRY,
    multiprocess_mode="livesum",
)


def count_events_on_commit(types: Iterable[str]) -> None:
    """Count appended events by type once the caller's transaction commits (at once when
    none is open); a rollback counts nothing."""
    tally = Tally(types)
    transaction.on_commit(lambda: _count(EVENTS_APPENDED, tally))


_TOKEN_KINDS = {
    "input_tokens": "input",
    "cached_input_tokens": "cached_input",
    "output_tokens": "output",
    "reasoning_output_tokens": "reasoning",
    "total_tokens": "total",
}


def count_tokens(backend_profile: str, payloads: Iterable[dict[str, object]]) -> None:
    """Count the tokens of committed `token_usage` payloads (other payloads add nothing)."""
    tally: Tally[str] = Tally()
    for payload in payloads:
        for key, kind in _TOKEN_KINDS.items():
            value = payload.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                tally[kind] += value
    for kind, value in tally.items():
        TOKENS_USED.labels(backend_profile, kind).inc(value)


def count_dispatch(outcomes: Mapping[str, int]) -> None:
    """Count a finished dispatch batch (`DispatchCounts.as_dict()`); call after commit."""
    _count(DISPATCH_INTENTS, outcomes)


def count_relay(outcomes: Mapping[str, int]) -> None:
    """Count a settled relay batch; `claimed` is left out (the relay's claims are leases,
    counted again by their outcome). Call after the settle committed."""
    _count(OUTBOX_RECORDS, {k: v for k, v in outcomes.items() if k != "claimed"})


def _count(counter: Counter, outcomes: Mapping[str, int]) -> None:
    for label, value in outcomes.items():
        if value:
            counter.labels(label).inc(value)


def route_label(route: str) -> str:
    """A route pattern as a label: regex groups (DRF routers) read like path converters,
    `api/v1/^runs/(?P<pk>[^/.]+)$` → `api/v1/runs/<pk>`."""
    return _REGEX_GROUP.sub(r"<\1>", route).replace("^", "").replace("$", "")
