"""`manage.py up`: run the control plane on embedded defaults (`make run`).

Applies migrations (to the embedded PostgreSQL when DATABASE_URL is unset), makes sure a
local client key exists so a first-time user can call the API at once, and serves the API.
"""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from agentrun.auth import issue_api_key
from agentrun.models import ApiKey

LOCAL_TENANT = "local"


class Command(BaseCommand):
    help = "Migrate and serve agentrun (embedded PostgreSQL unless DATABASE_URL is set)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--addr",
            default=os.environ.get("AGENTRUN_BIND", "127.0.0.1:8000"),
            help="address:port to serve the API on",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(
            f"database: {settings.DATABASES['default']['NAME']} "
            f"({'DATABASE_URL' if os.environ.get('DATABASE_URL') else 'embedded'})"
        )
        if not ApiKey.objects.filter(tenant_id=LOCAL_TENANT, role="client").exists():
            issued = issue_api_key(tenant_id=LOCAL_TENANT, role="client", name="local")
            self.stdout.write(
                f"client key for tenant {LOCAL_TENANT!r} (shown once): {issued.secret}"
            )
        self.stdout.write(
            f"API: http://{options['addr']}/api/v1/  schema: /api/schema  admin: /admin/"
        )
        call_command("runserver", options["addr"], use_reloader=False, skip_checks=True)
