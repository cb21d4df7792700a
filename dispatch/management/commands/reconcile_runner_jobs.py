"""`manage.py reconcile_runner_jobs [--limit N] [--dry-run] [--json]`: ask launchers about
runner jobs of live runs and fail the runs whose runner is gone (the beat's pass, once)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentrun import conf
from dispatch.services.reconcile import reconcile_runner_jobs


class Command(BaseCommand):
    help = "Reconcile runner jobs with their launchers; fail runs whose runner job is gone."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=conf.maintenance_batch_size())
        parser.add_argument("--grace-ms", type=int, default=conf.reconcile_grace_ms())
        parser.add_argument("--dry-run", action="store_true", help="observe, change nothing")
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        counts = reconcile_runner_jobs(
            limit=options["limit"], grace_ms=options["grace_ms"], dry_run=options["dry_run"]
        ).as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(counts))
        else:
            self.stdout.write(" ".join(f"{name}={value}" for name, value in counts.items()))
