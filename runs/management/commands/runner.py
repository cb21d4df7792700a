"""`manage.py runner --run RUN_ID`: the reference runner, as the local launcher starts it.

The API base URL and the run-scoped runner key come from the environment
(`AGENTRUN_API_URL`, `AGENTRUN_RUNNER_KEY`) or from `--api-url` / `--token`.
Exit status: 0 finished, 3 cancelled, 4 lease or API lost.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runner.client import ApiClient
from runner.loop import Runner


class Command(BaseCommand):
    help = "Run one run's commands on its backend (the reference runner)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", dest="run_id", required=True)
        parser.add_argument("--api-url", default=os.environ.get("AGENTRUN_API_URL"))
        parser.add_argument("--token", default=os.environ.get("AGENTRUN_RUNNER_KEY"))
        parser.add_argument("--lease-ms", type=int, default=30_000)
        parser.add_argument("--runner-id", default=os.environ.get("AGENTRUN_RUNNER_ID"))

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["api_url"] or not options["token"]:
            raise CommandError(
                "set AGENTRUN_API_URL and AGENTRUN_RUNNER_KEY (or --api-url, --token)"
            )
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        runner = Runner(
            ApiClient(options["api_url"], options["token"]),
            options["run_id"],
            lease_ms=options["lease_ms"],
            runner_id=options["runner_id"],
        )
        code = runner.run()
        self.stdout.write(
            f"runner {runner.runner_id}: run {options['run_id']} -> exit {code}"
            f"{' (' + runner.stop_reason + ')' if runner.stop_reason else ''}"
        )
        sys.exit(code)
