"""`manage.py adopt_database [--batch-size N] [--max-batches M] [--status]`.

Runs (or continues) the data conversion of an adopted original database
(ops/adoption_keys.py); `migrate` runs it too. `--max-batches` bounds one sitting: the
next run continues from the saved position.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.db.migrations.executor import MigrationExecutor

from ops import adoption_keys
from ops import adoption_sql as sql


class Command(BaseCommand):
    help = "Convert an adopted original database's JSON keys, hashes and sequences."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--database", default="default")
        parser.add_argument("--batch-size", type=int, default=1_000)
        parser.add_argument("--max-batches", type=int, default=None)
        parser.add_argument("--status", action="store_true", help="print the steps and stop")

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if options["status"]:
            with connection.cursor() as cursor:
                if not sql.rows(cursor, sql.TABLE_EXISTS, [sql.PROGRESS_TABLE])[0][0]:
                    self.stdout.write("This database was not adopted.")
                    return
                for step, last, done, changed in sql.rows(cursor, sql.ALL_STEPS):
                    state = "done" if done else f"after {last!r}"
                    self.stdout.write(f"{step}: {state}, {changed} rows changed")
            return
        if not adoption_keys.pending_steps(connection):
            self.stdout.write("Nothing to convert.")
            return
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            # The conversion reads rows through today's models.
            raise CommandError("Unapplied migrations: run `manage.py migrate` (it converts too).")
        finished = adoption_keys.convert(
            connection,
            batch_size=options["batch_size"],
            max_batches=options["max_batches"],
            log=self.stdout.write,
        )
        self.stdout.write("Converted." if finished else "Stopped early; run again to continue.")
