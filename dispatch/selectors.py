"""Reads of the dispatch app: capacity facts for the runner-create fence, a command's
intent, and status.

These are operator and worker reads, not tenant reads: nothing here is scoped to an API
key (the status endpoint is operator only).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils import timezone

from dispatch.models import OPEN_INTENT_STATES, IntentState, RunnerDispatchIntent
from runs.models import LEASED_RUN_STATUSES, LIVE_RUN_STATUSES, Backend, Command, Run


def max_concurrent_runs(profile: str) -> int | None:
    """The profile's `capacity.max_concurrent_runs`; None when unset (no limit)."""
    capacity = Backend.objects.filter(profile=profile).values_list("capacity", flat=True).first()
    return capacity_limit(capacity)


def capacity_limit(capacity: Any) -> int | None:
    """`max_concurrent_runs` of a backend's `capacity` object; None when unset or invalid."""
    value = capacity.get("max_concurrent_runs") if isinstance(capacity, dict) else None
    return value if isinstance(value, int) and value >= 0 else None


def active_runs_by_tenant(*, profile: str, among: list[str]) -> tuple[dict[str, int], set[str]]:
    """How many runs of a profile hold a runner, per tenant, and which of `among` do.

    A run is active while it is not terminal and either a runner claimed it or a runner
    job was launched for it (a `dispatched` intent) and has not claimed it yet. Read under
    the runner-create fence, so no launch for this profile runs concurrently.
    """
    active = _active(profile)
    counts = active.values("tenant_id").annotate(count=Count("id", distinct=True))
    by_tenant = {row["tenant_id"]: row["count"] for row in counts.order_by()}
    return by_tenant, set(active.filter(id__in=among).values_list("id", flat=True))


def _active(profile: str) -> QuerySet[Run]:
    # `status IN (live)`, not `NOT IN (terminal)`: the planner then uses the live-runs
    # partial index instead of scanning the whole history.
    return Run.objects.filter(backend_profile=profile, status__in=LIVE_RUN_STATUSES).filter(
        Q(status__in=LEASED_RUN_STATUSES) | Q(dispatch_intents__state=IntentState.DISPATCHED)
    )


def contending_tenants(profile: str) -> set[str]:
    """The tenants with an open intent (waiting or being dispatched) on a profile's runs:
    with the tenants holding its runners, those the profile's slots are shared among."""
    waiting = RunnerDispatchIntent.objects.filter(
        state__in=OPEN_INTENT_STATES, run__backend_profile=profile
    )
    return set(waiting.values_list("run__tenant_id", flat=True).distinct())


def dispatch_status() -> dict[str, Any]:
    """Backlog facts (seed `runnerDispatchStatus`) plus due, leased and per-state counts."""
    now = timezone.now()
    is_open = Q(state__in=OPEN_INTENT_STATES)
    facts = RunnerDispatchIntent.objects.aggregate(
        total_count=Count("id"),
        backlog_count=Count("id", filter=is_open),
        retrying_count=Count("id", filter=Q(state=IntentState.RETRY)),
        due_count=Count(
            "id",
            filter=Q(state__in=[IntentState.PENDING, IntentState.RETRY], next_attempt_at__lte=now),
        ),
        expired_lease_count=Count(
            "id", filter=Q(state=IntentState.DISPATCHING, lease_expires_at__lte=now)
        ),
        oldest_pending_at=Min("created_at", filter=is_open),
        max_attempt_count=Max("attempt_count"),
        **{f"{state}_count": Count("id", filter=Q(state=state)) for state in IntentState.values},
    )
    oldest = facts["oldest_pending_at"]
    return {
        "queue": "runner-dispatch",
        **facts,
        "max_attempt_count": facts["max_attempt_count"] or 0,
        "oldest_pending_age_seconds": (now - oldest).total_seconds() if oldest else None,
    }


def intent_of(command: Command) -> RunnerDispatchIntent | None:
    """The command's dispatch intent (at most one per command), if it has one."""
    return RunnerDispatchIntent.objects.filter(command=command).first()
