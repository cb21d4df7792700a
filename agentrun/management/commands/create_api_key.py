"""`manage.py create_api_key --tenant T --role client [--run RUN_ID] [--json]`."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agentrun.auth import issue_api_key
from agentrun.models import ApiKeyRole


class Command(BaseCommand):
    help = "Create an API key. The key is printed once; only its digest is stored."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="tenant the key acts for")
        parser.add_argument("--role", required=True, choices=ApiKeyRole.values)
        parser.add_argument("--run", dest="run_id", help="the one run a runner key may touch")
        parser.add_argument("--name", default="", help="a label for operators")
        parser.add_argument("--json", action="store_true", help="print a JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            issued = issue_api_key(
                tenant_id=options["tenant"],
                role=options["role"],
                run_id=options["run_id"],
                name=options["name"],
            )
        except ValueError as error:
            raise CommandError(str(error)) from error
        key = issued.api_key
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {"id": key.id, "key": issued.secret, "tenant": key.tenant_id, "role": key.role}
                )
            )
            return
        self.stdout.write(f"{key.role} key {key.id} for tenant {key.tenant_id}: {issued.secret}")
        self.stdout.write("Store it now: it is not shown again.")
