"""`manage.py relay_outbox [--loop]`: relay outbox records to Kafka.

Without `--loop`, one batch (what the beat task runs). With `--loop`, batch after batch,
sleeping only when a batch found nothing; SIGTERM or SIGINT lets the running batch finish,
then the command exits 0 with the totals.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from outbox.kafka import outbox_enabled
from outbox.services.relay import relay_outbox_batch, run_relay_loop


class Command(BaseCommand):
    help = "Relay Kafka outbox records: one batch, or --loop until SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="keep relaying until SIGTERM")
        parser.add_argument("--limit", type=int, default=None, help="records per batch")
        parser.add_argument(
            "--idle-seconds", type=float, default=1.0, help="sleep after an empty batch"
        )
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if not outbox_enabled():
            raise CommandError("the outbox is off: set AGENTRUN_KAFKA_BOOTSTRAP_SERVERS")
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        if options["loop"]:
            stop = threading.Event()
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: stop.set())
            self.stdout.write("relaying until SIGTERM")
            self.stdout.flush()
            result = run_relay_loop(
                stop=stop, idle_seconds=options["idle_seconds"], limit=options["limit"]
            )
        else:
            result = relay_outbox_batch(limit=options["limit"])
        counts = result.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(counts))
        else:
            self.stdout.write(", ".join(f"{name} {value}" for name, value in counts.items()))
