"""Tenant quotas (SPEC §9.4): an operator sets or clears a tenant's tokens per rolling day.

What a quota refuses is read by `runs.usage.check_tenant_quota`; this module only writes.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from runs.control_models import TenantQuota


def set_tenant_quota(*, tenant_id: str, max_tokens_per_day: int) -> TenantQuota:
    """Create or replace the tenant's quota. Locks: none (one upsert)."""
    with transaction.atomic(durable=True):
        quota, _ = TenantQuota.objects.update_or_create(
            tenant_id=tenant_id,
            defaults={"max_tokens_per_day": max_tokens_per_day, "updated_at": timezone.now()},
        )
    return quota


def clear_tenant_quota(*, tenant_id: str) -> bool:
    """Remove the tenant's quota; whether there was one."""
    with transaction.atomic(durable=True):
        deleted, _ = TenantQuota.objects.filter(pk=tenant_id).delete()
    return deleted > 0
