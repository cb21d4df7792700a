"""`manage.py agentrun_status [--json] [--items N] [--stale-after SECONDS]`: backlogs and
oldest items of dispatch, outbox and queue; runs by status; running sessions; runners of
live runs with stale heartbeats. The same facts as the admin dashboard (`ops.status`).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ops.status import collect_status, status_json, status_text


class Command(BaseCommand):
    help = "Print the operator status: backlogs, oldest items, runs, sessions, stale runners."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--items", type=int, default=5, help="oldest items listed per backlog (default 5)"
        )
        parser.add_argument(
            "--stale-after",
            type=float,
            default=None,
            help="seconds without a heartbeat that make a live run's runner stale "
            "(default: AGENTRUN_DEFAULT_LEASE_MS)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        status = collect_status(
            items=max(0, options["items"]), stale_after_s=options["stale_after"]
        )
        self.stdout.write(status_json(status) if options["json"] else status_text(status))
