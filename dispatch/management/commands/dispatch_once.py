"""`manage.py dispatch_once [--limit N] [--json]`: one dispatch batch, as the beat runs it."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from agentrun.leases import lease_owner
from dispatch.services.launch import dispatch_batch


class Command(BaseCommand):
    help = "Claim one batch of due runner dispatch intents and launch their runner jobs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, help="batch size (AGENTRUN_DISPATCH_BATCH_SIZE)")
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        counts = dispatch_batch(
            owner=lease_owner("dispatch", tag="cli"), limit=options["limit"]
        ).as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(counts))
        else:
            self.stdout.write(" ".join(f"{name}={value}" for name, value in counts.items()))
