"""`manage.py migrate`, adopting an original agentrun database in place first.

Django's own command, with two steps around it (ops/adoption.py): before the migration
plan is made, the original's tables are brought to our initial migrations' schema and
those migrations recorded; after the migrations, the adopted rows' camelCase JSON keys,
payload hashes and sequences are converted in resumable batches (ops/adoption_keys.py).
On a fresh database, or one our migrations made, both steps find nothing to do. `--plan`
and `--check` change nothing, so they adopt nothing either.
"""

from __future__ import annotations

from typing import Any

from django.core.management.commands import migrate
from django.db import connections

from ops import adoption, adoption_keys


class Command(migrate.Command):
    help = f"{migrate.Command.help} An original agentrun database is adopted in place first."

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        read_only = options.get("plan") or options.get("check_unapplied")
        if not read_only:
            for label in adoption.adopt_schema(connection):
                self.stdout.write(f"Adopted the original's tables of {label} in place.")
        super().handle(*args, **options)
        if not read_only and adoption_keys.pending_steps(connection):
            adoption_keys.convert(connection, log=self.stdout.write)
