"""`manage.py prune_outbox`: delete delivered outbox records past the retention period.

The same service the beat task runs, in bounded batches. Undelivered records are never
deleted. `--dry-run` only counts; without `--no-input` the command asks first.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentrun import conf
from outbox.selectors import count_prunable
from outbox.services.prune import prune_cutoff, prune_delivered_outbox


class Command(BaseCommand):
    help = "Delete delivered Kafka outbox records older than the retention period."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--retention-days",
            type=int,
            default=conf.outbox_retention_days(),
            help="keep delivered records this many days (default: the setting)",
        )
        parser.add_argument("--batch-size", type=int, default=1_000)
        parser.add_argument("--max-batches", type=int, default=1_000)
        parser.add_argument("--dry-run", action="store_true", help="only count")
        parser.add_argument("--no-input", action="store_true", help="do not ask to confirm")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["retention_days"]
        if days < 0 or options["batch_size"] < 1 or options["max_batches"] < 1:
            raise CommandError("--retention-days must be >= 0, the batch options >= 1")
        prunable = count_prunable(retention_days=days)
        if options["dry_run"] or prunable == 0:
            self._report({"prunable": prunable, "deleted": 0, "retention_days": days}, options)
            return
        if not options["no_input"]:
            self._confirm(f"Delete {prunable} delivered records older than {days} days?")
        result = prune_delivered_outbox(
            cutoff=prune_cutoff(retention_days=days),
            batch_size=options["batch_size"],
            max_batches=options["max_batches"],
        )
        self._report({"prunable": prunable, **result.as_dict(), "retention_days": days}, options)

    def _confirm(self, question: str) -> None:
        try:
            answer = input(f"{question} [y/N] ")
        except (EOFError, OSError) as error:  # no stdin to read an answer from
            raise CommandError("no terminal to confirm on: pass --no-input") from error
        if answer.strip().lower() not in {"y", "yes"}:
            raise CommandError("cancelled")

    def _report(self, summary: dict[str, Any], options: dict[str, Any]) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(summary))
        else:
            self.stdout.write(", ".join(f"{name} {value}" for name, value in summary.items()))
