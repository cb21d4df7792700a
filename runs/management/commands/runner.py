"""`manage.py runner --run RUN_ID`: a shim for `python -m runner run --run RUN_ID`.

The launchers start `python -m runner`, which loads no Django; this command stays for
existing scripts and does exactly the same (same options, environment and exit status),
only with the server's settings loaded around it.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runner.cli import UsageError, add_run_arguments, run_runner


class Command(BaseCommand):
    help = "Run one run's commands on its backend (the reference runner)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_run_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            code = run_runner(options, sys.stdout)
        except UsageError as error:
            raise CommandError(str(error)) from error
        sys.exit(code)
