"""The operator's status: one set of facts for `agentrun_status`, the admin dashboard and
the `/metrics` backlog gauges, so the three never disagree.

`collect_status` composes each app's own status selector (`dispatch_status`,
`outbox_status`, `queue_stats`) and adds what they do not say: the oldest waiting items
of each backlog, runs by status, running sessions and runners whose heartbeat went
stale while their run is still live. Terminal runs are counted over a recent window only
(the status index has `updated_at`), so the cost does not grow with the runs table.

This is an operator read across every tenant; nothing here is scoped to an API key, and
nothing in it writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.utils import timezone

from agentrun import conf
from dispatch.models import OPEN_INTENT_STATES, RunnerDispatchIntent
from dispatch.selectors import dispatch_status
from ops.heartbeats import liveness
from outbox.models import KafkaEventOutbox
from outbox.selectors import outbox_status
from queues.models import QueueTask, TaskState
from queues.selectors import queue_stats
from runs.models import (
    LEASED_RUN_STATUSES,
    LIVE_RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
    Run,
    Runner,
)
from sessions.models import ExecutionState, Session
from webhooks.selectors import webhook_status

TERMINAL_WINDOW = timedelta(hours=24)


def collect_status(
    *, now: datetime | None = None, items: int = 5, stale_after_s: float | None = None
) -> dict[str, Any]:
    """Every fact of the status, with up to `items` oldest items per backlog.

    `stale_after_s`: a runner of a live run whose last heartbeat is older than this is
    stale (default: one default lease, `AGENTRUN_DEFAULT_LEASE_MS`).
    """
    now = now or timezone.now()
    if stale_after_s is None:
        stale_after_s = conf.default_lease_ms() / 1000
    return {
        "generated_at": now,
        "dispatch": {**dispatch_status(), "oldest": _oldest_intents(now, items)},
        "outbox": {**outbox_status(now=now), "oldest": _oldest_outbox(now, items)},
        "queue": _queue(now, items),
        "webhooks": webhook_status(now=now, items=items),
        "runs": _runs(now),
        "sessions": {"running": _running_sessions()},
        "runners": _stale_runners(now, items, stale_after_s),
        "processes": liveness(now=now),  # worker and beat heartbeats
    }


def status_json(status: dict[str, Any]) -> str:
    """The status as JSON (timestamps in ISO 8601)."""
    return json.dumps(status, cls=DjangoJSONEncoder, indent=2, sort_keys=True)


def _age(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else round((now - since).total_seconds(), 3)


def _oldest_intents(now: datetime, items: int) -> list[dict[str, Any]]:
    """The oldest open dispatch intents (the partial open index holds them)."""
    rows = (
        RunnerDispatchIntent.objects.filter(state__in=OPEN_INTENT_STATES)
        .order_by("created_at", "id")
        .values(
            "id", "run_id", "command_id", "state", "attempt_count", "next_attempt_at", "created_at"
        )[:items]
    )
    return [_with_age(row, now) for row in rows]


def _oldest_outbox(now: datetime, items: int) -> list[dict[str, Any]]:
    """The undelivered records first in line (lowest `outbox_seq`)."""
    rows = (
        KafkaEventOutbox.objects.filter(delivered_at__isnull=True)
        .order_by("outbox_seq")
        .values("id", "run_id", "outbox_seq", "attempt_count", "next_attempt_at", "created_at")[
            :items
        ]
    )
    return [_with_age(row, now) for row in rows]


def _queue(now: datetime, items: int) -> dict[str, Any]:
    """Tasks by state and the oldest pending ones (per-lane counts are left to the API:
    every session has a lane of its own)."""
    stats = queue_stats(tasks=QueueTask.objects.all(), queue=None)
    rows = (
        QueueTask.objects.filter(state=TaskState.PENDING)
        .order_by("created_at", "id")
        .values("id", "queue", "lane", "priority", "created_at")[:items]
    )
    return {
        "total": stats["total"],
        "by_state": stats["by_state"],
        "oldest_pending_at": stats["oldest_pending_at"],
        "oldest_pending_age_seconds": stats["oldest_pending_age_seconds"],
        "oldest": [_with_age(row, now) for row in rows],
    }


def _runs(now: datetime) -> dict[str, Any]:
    """Live runs by status; terminal runs by status over the last `TERMINAL_WINDOW`; live
    claims whose lease has expired (the reaper's next work)."""
    live = _count_by_status(Run.objects.filter(status__in=LIVE_RUN_STATUSES))
    recent = _count_by_status(
        Run.objects.filter(status__in=TERMINAL_RUN_STATUSES, updated_at__gte=now - TERMINAL_WINDOW)
    )
    expired = Run.objects.filter(status__in=LEASED_RUN_STATUSES, lease_expires_at__lte=now)
    return {
        "live": {status: live.get(status, 0) for status in LIVE_RUN_STATUSES},
        "terminal_last_24h": {
            status: recent.get(status, 0) for status in sorted(TERMINAL_RUN_STATUSES)
        },
        "expired_leases": expired.count(),
    }


def _count_by_status(runs: QuerySet[Run]) -> dict[str, int]:
    rows = runs.values_list("status").annotate(count=Count("id")).order_by()
    return {status: count for status, count in rows}


def _running_sessions() -> int:
    return Session.objects.filter(execution_state=ExecutionState.RUNNING).count()


def _stale_runners(now: datetime, items: int, stale_after_s: float) -> dict[str, Any]:
    """Runners of live runs (still claimed by them) that stopped heartbeating."""
    holds_live_run = Run.objects.filter(
        pk=OuterRef("run_id"),
        claimed_by=OuterRef("pk"),
        status__in=LEASED_RUN_STATUSES,
    )
    stale = Runner.objects.filter(
        Exists(holds_live_run), heartbeat_at__lt=now - timedelta(seconds=stale_after_s)
    )
    rows = stale.order_by("heartbeat_at").values("id", "run_id", "backend_profile", "heartbeat_at")
    return {
        "stale_after_seconds": stale_after_s,
        "stale_count": stale.count(),
        "stale": [_with_age(row, now, name="heartbeat_at") for row in rows[:items]],
    }


def _with_age(row: Mapping[str, Any], now: datetime, *, name: str = "created_at") -> dict[str, Any]:
    """The row with the age of its `name` timestamp."""
    return {**row, "age_seconds": _age(row[name], now)}


def status_text(status: dict[str, Any]) -> str:
    """The status as a few lines of text, one section per line, oldest items indented."""
    d, o, q, r = status["dispatch"], status["outbox"], status["queue"], status["runs"]
    runners = status["runners"]
    lines = [
        f"agentrun status at {status['generated_at'].isoformat()}",
        f"dispatch  open {d['backlog_count']} (pending {d['pending_count']}, retry "
        f"{d['retry_count']}, dispatching {d['dispatching_count']}), due {d['due_count']}, "
        f"lease expired {d['expired_lease_count']}, failed {d['failed_count']}; "
        f"oldest open {_seconds(d['oldest_pending_age_seconds'])}",
        *_items(d["oldest"], "id", "run_id", "state", "attempt_count"),
        f"outbox    {'on' if o['enabled'] else 'off'} ({o['topic']}): undelivered {o['backlog']}, "
        f"retrying {o['retrying']}, in flight {o['leased']}, max attempts "
        f"{o['max_attempt_count']}; oldest {_seconds(o['oldest_pending_age_seconds'])}",
        *_items(o["oldest"], "id", "run_id", "outbox_seq", "attempt_count"),
        *([f"  first error: {o['first_error']}"] if o["first_error"] else []),
        f"queue     {_pairs(q['by_state'])}; oldest pending "
        f"{_seconds(q['oldest_pending_age_seconds'])}",
        *_items(q["oldest"], "id", "queue", "priority"),
        *_webhook_lines(status["webhooks"]),
        f"runs      live: {_pairs(r['live'])}; last 24 h: {_pairs(r['terminal_last_24h'])}; "
        f"expired leases {r['expired_leases']}",
        f"sessions  running {status['sessions']['running']}",
        f"runners   stale (no heartbeat for {runners['stale_after_seconds']:g} s): "
        f"{runners['stale_count']}",
        *_items(runners["stale"], "id", "run_id", "backend_profile"),
        *(_process_line(name, state) for name, state in status["processes"].items()),
    ]
    return "\n".join(lines)


def _webhook_lines(w: dict[str, Any]) -> list[str]:
    head = (
        f"webhooks  {w['endpoints']} endpoints: undelivered {w['backlog']}, retrying "
        f"{w['retrying']}, failing endpoints {w['failing_count']}, disabled "
        f"{w['disabled_count']}; oldest {_seconds(w['oldest_pending_age_seconds'])}"
    )
    return [
        head,
        *(
            f"  failing {row['id']} {row['url']} since {row['failing_since']}"
            for row in w["failing"]
        ),
    ]


def _process_line(name: str, state: dict[str, Any]) -> str:
    alive = "live" if state["ok"] else "NOT LIVE"
    last = state["last_task_at"].isoformat() if state["last_task_at"] else "never"
    return (
        f"{name:<9} {alive}: {state['live_count']} live, last heartbeat "
        f"{_seconds(state['age_seconds'])}, last task {last}"
    )


def _seconds(age: float | None) -> str:
    return "-" if age is None else f"{age:.0f}s ago"


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items())


def _items(rows: list[dict[str, Any]], *names: str) -> list[str]:
    return [
        "  " + " ".join(str(row[name]) for name in names) + f" ({_seconds(row['age_seconds'])})"
        for row in rows
    ]
