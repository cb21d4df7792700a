"""`manage.py migrate`, adopting an original agentrun database in place first.

Django's own command, with two steps around it (ops/adoption.py): before the migration
plan is made, the original's tables are brought to our initial migrations' schema and
those migrations recorded; after the migrations, the adopted rows' camelCase JSON keys,
payload hashes and sequences are converted in resumable batches (ops/adoption_keys.py).
On a fresh database, or one our migrations made, both steps find nothing to do. `--plan`
and `--check` change nothing, so they adopt nothing either. Concurrent `migrate` runs
take turns (an advisory lock), so a database is adopted once.
"""

from __future__ import annotations

from typing import Any

from django.core.management.commands import migrate
from django.db import connections

from agentrun.locks import LockKey, advisory_session_lock
from ops import adoption, adoption_keys


class Command(migrate.Command):
    help = f"{migrate.Command.help} An original agentrun database is adopted in place first."

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("plan") or options.get("check_unapplied"):
            super().handle(*args, **options)
            return
        # One migrating process at a time: the second finds the work done.
        with advisory_session_lock(LockKey.MIGRATE, options["database"]):
            connection = connections[options["database"]]
            for label in adoption.adopt_schema(connection):
                self.stdout.write(f"Adopted the original's tables of {label} in place.")
            super().handle(*args, **options)
            if adoption_keys.pending_steps(connection):
                adoption_keys.convert(connection, log=self.stdout.write)
