"""`manage.py reconcile_runner_jobs [--limit N] [--dry-run] [--json]`: ask launchers about
runner jobs of live runs and fail the runs whose runner is gone (the beat's pass, once)."""

from __future__ import annotations

from typing import Any

from agentrun import conf
from agentrun.management.sweeps import SweepCommand
from dispatch.services.reconcile import reconcile_runner_jobs


class Command(SweepCommand):
    help = "Reconcile runner jobs with their launchers; fail runs whose runner job is gone."
    dry_run_help = "observe, change nothing"
    json_help = "print the counts as JSON"

    def default_grace_ms(self) -> int:
        return conf.reconcile_grace_ms()

    def sweep(self, *, limit: int, grace_ms: int, dry_run: bool) -> dict[str, Any]:
        return reconcile_runner_jobs(limit=limit, grace_ms=grace_ms, dry_run=dry_run).as_dict()
