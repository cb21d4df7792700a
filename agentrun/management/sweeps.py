"""The shape of a maintenance sweep command (`reap_leases`, `reconcile_runner_jobs`): one
pass of a beat task, run by hand.

Each sweeps at most `--limit` rows older than `--grace-ms`, can be asked to change nothing
(`--dry-run`), and prints what it did as `name=value` pairs or, with `--json`, one JSON
object, so an operator's shell and a script read the same pass the beat runs. Subclasses
name their grace setting and the pass itself.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentrun import conf


class SweepCommand(BaseCommand):
    dry_run_help = "change nothing"
    json_help = "print the result as JSON"

    def default_grace_ms(self) -> int:
        raise NotImplementedError

    def sweep(self, *, limit: int, grace_ms: int, dry_run: bool) -> dict[str, Any]:
        """One pass; what it did (or, dry, would do), by name."""
        raise NotImplementedError

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=conf.maintenance_batch_size())
        parser.add_argument("--grace-ms", type=int, default=self.default_grace_ms())
        parser.add_argument("--dry-run", action="store_true", help=self.dry_run_help)
        parser.add_argument("--json", action="store_true", help=self.json_help)

    def handle(self, *args: Any, **options: Any) -> None:
        result = self.sweep(
            limit=options["limit"], grace_ms=options["grace_ms"], dry_run=options["dry_run"]
        )
        if options["json"]:
            self.stdout.write(json.dumps(result))
        else:
            self.stdout.write(" ".join(f"{name}={value}" for name, value in result.items()))
