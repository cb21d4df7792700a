"""`manage.py reap_leases [--limit N] [--dry-run] [--json]`: fail runs whose runner's lease
expired without a heartbeat (the beat's lease reaper, once)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from agentrun import conf
from agentrun.management.sweeps import SweepCommand
from runs.selectors import expired_lease_run_ids
from runs.services.reaper import reap_expired_leases


class Command(SweepCommand):
    help = "Fail (infra-failed) claimed runs whose lease expired without a heartbeat."
    dry_run_help = "list, change nothing"

    def default_grace_ms(self) -> int:
        return conf.lease_reap_grace_ms()

    def sweep(self, *, limit: int, grace_ms: int, dry_run: bool) -> dict[str, Any]:
        if dry_run:
            cutoff = timezone.now() - timedelta(milliseconds=grace_ms)
            return {"would_reap": expired_lease_run_ids(cutoff=cutoff, limit=limit)}
        return reap_expired_leases(limit=limit, grace_ms=grace_ms).as_dict()
