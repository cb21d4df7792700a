"""`manage.py reap_leases [--limit N] [--dry-run] [--json]`: fail runs whose runner's lease
expired without a heartbeat (the beat's lease reaper, once)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from agentrun import conf
from runs.selectors import expired_lease_run_ids
from runs.services.reaper import reap_expired_leases


class Command(BaseCommand):
    help = "Fail (infra-failed) claimed runs whose lease expired without a heartbeat."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=conf.maintenance_batch_size())
        parser.add_argument("--grace-ms", type=int, default=conf.lease_reap_grace_ms())
        parser.add_argument("--dry-run", action="store_true", help="list, change nothing")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["dry_run"]:
            cutoff = timezone.now() - timedelta(milliseconds=options["grace_ms"])
            result: dict[str, Any] = {
                "would_reap": expired_lease_run_ids(cutoff=cutoff, limit=options["limit"])
            }
        else:
            result = reap_expired_leases(
                limit=options["limit"], grace_ms=options["grace_ms"]
            ).as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(result))
        else:
            self.stdout.write(" ".join(f"{name}={value}" for name, value in result.items()))
