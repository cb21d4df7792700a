"""`manage.py schedule_queue [--limit N] [--json] [--loop]`: the scheduler's beat task,
from a shell. Calls the same services as `queue.schedule_batch`."""

from __future__ import annotations

import json
import logging
import signal
import time
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import InterfaceError, OperationalError, close_old_connections

from agentrun import conf
from queues.services.scheduler import scheduler_pass

logger = logging.getLogger("queues.scheduler")


class Command(BaseCommand):
    help = "Start a batch of pending work-queue tasks (priority first, then age)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=conf.queue_batch_size())
        parser.add_argument("--json", action="store_true", help="print the counts as JSON")
        parser.add_argument("--loop", action="store_true", help="repeat until SIGTERM")
        parser.add_argument("--interval", type=float, default=2.0, help="idle sleep, seconds")

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = False

        def stop(signum: int, frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True  # finish the batch in hand, then exit

        signal.signal(signal.SIGTERM, stop)
        while True:
            try:
                counts = scheduler_pass(limit=options["limit"])
            except (OperationalError, InterfaceError) as error:
                if not options["loop"]:
                    raise
                # A lost connection (a restart, a failover, pg_terminate_backend): the task
                # in flight rolled back whole; reconnect on the next pass, as the relay does.
                logger.warning("queue scheduler pass failed on the database: %s", error)
                close_old_connections()
                counts = {}
            self._report(counts, as_json=options["json"])
            if not options["loop"] or stopping:
                return
            if not any(counts.values()):
                time.sleep(options["interval"])

    def _report(self, counts: dict[str, int], *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(counts))
            return
        summary = ", ".join(f"{name} {count}" for name, count in counts.items())
        self.stdout.write(f"queue: {summary}")
