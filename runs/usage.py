"""Reads of token usage (SPEC §9.4): the sums of `token_usage` events, and the tenant quota.

A `token_usage` event reports tokens used since the previous one (the scripted backend per
tick and per answer, the Codex backend once per turn), so a run's, a session's or a
tenant's usage is the plain sum of its events' fields, per model. The runs API checks the
fields are non-negative integers when a runner appends them, so the casts below cannot
fail on stored data.

A tenant quota (`TenantQuota`, operator-set) caps a tenant's tokens over the last 24 hours;
`check_tenant_quota` refuses a new turn or task past it with 429 `quota_exceeded` and
`Retry-After` (when the oldest counted event leaves the window). A tenant without a quota
costs one primary-key read.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import BigIntegerField, Count, Min, QuerySet, Sum, TextField, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from agentrun.errors import AgentRunError, not_found
from runs.control_models import TenantQuota
from runs.models import Event, Run

# Output name → the `token_usage` payload key it sums.
USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "cached_input_tokens": "cached_input_tokens",
    "output_tokens": "output_tokens",
    "reasoning_tokens": "reasoning_output_tokens",
    "total_tokens": "total_tokens",
}
QUOTA_WINDOW = timedelta(days=1)
UNKNOWN_MODEL = "unknown"


def _sum(key: str) -> Coalesce:
    return Coalesce(Sum(Cast(KeyTextTransform(key, "payload"), BigIntegerField())), Value(0))


def usage_of(events: QuerySet[Event]) -> dict[str, Any]:
    """The totals and per-model sums of the `token_usage` events among `events`."""
    rows = (
        events.filter(type="token_usage")
        .annotate(
            usage_model=Coalesce(
                KeyTextTransform("model", "payload"), Value(UNKNOWN_MODEL), output_field=TextField()
            )
        )
        .order_by()
        .values("usage_model")
        .annotate(events=Count("id"), **{name: _sum(key) for name, key in USAGE_FIELDS.items()})
    )
    by_model: dict[str, dict[str, int]] = {}
    for row in rows:
        found: dict[str, Any] = dict(row)
        model = str(found.pop("usage_model"))
        by_model[model] = {name: int(value) for name, value in found.items()}
    by_model = dict(sorted(by_model.items()))
    totals = {name: sum(m[name] for m in by_model.values()) for name in ["events", *USAGE_FIELDS]}
    return {**totals, "by_model": by_model}


def run_usage(*, run: Run) -> dict[str, Any]:
    return {"run_id": run.id, **usage_of(Event.objects.filter(run=run))}


def runs_usage(*, runs: QuerySet[Run]) -> dict[str, Any]:
    """Usage of several runs (a session's), one statement."""
    return usage_of(Event.objects.filter(run__in=runs))


def tenant_usage(*, tenant_id: str | None, since: datetime | None) -> dict[str, Any]:
    """An operator's view: one tenant's (or every tenant's) usage since a time."""
    events = Event.objects.all()
    if tenant_id:
        events = events.filter(run__tenant_id=tenant_id)
    if since is not None:
        events = events.filter(created_at__gte=since)
    return {"tenant_id": tenant_id, "since": since, **usage_of(events)}


def tenant_quota(*, tenant_id: str) -> TenantQuota:
    quota = TenantQuota.objects.filter(pk=tenant_id).first()
    if quota is None:
        raise not_found("quota", tenant_id)
    return quota


def check_tenant_quota(*, tenant_id: str, now: datetime | None = None) -> None:
    """Errors: 429 `quota_exceeded` (with `Retry-After`) when the tenant has used its quota
    of tokens over the last 24 hours."""
    quota = TenantQuota.objects.filter(pk=tenant_id).first()
    if quota is None:
        return
    now = now or timezone.now()
    window = Event.objects.filter(
        run__tenant_id=tenant_id, type="token_usage", created_at__gt=now - QUOTA_WINDOW
    )
    found = window.aggregate(used=_sum("total_tokens"), oldest=Min("created_at"))
    if found["used"] < quota.max_tokens_per_day:
        return
    oldest = found["oldest"] or now
    retry_after = max(1, int((oldest + QUOTA_WINDOW - now).total_seconds()) + 1)
    raise AgentRunError(
        f"tenant {tenant_id} used {found['used']} tokens in the last 24 hours; its quota "
        f"is {quota.max_tokens_per_day}",
        code="quota_exceeded",
        http_status=429,
        details={
            "used_tokens": found["used"],
            "max_tokens_per_day": quota.max_tokens_per_day,
            "retry_after_s": retry_after,
        },
    )
