"""`manage.py up` (what `make run` starts): the whole control plane on embedded defaults.

- the database: the embedded PostgreSQL when DATABASE_URL is unset, migrated;
- a Celery worker with beat (dispatch, outbox relay, reapers), on a broker that needs no
  service when CELERY_BROKER_URL is unset (kombu's filesystem transport);
- the local launcher, inside that worker: dispatched turns start `manage.py runner`;
- the API server, in this process.

It prints the URL and a client API key for tenant `local` (created on first start).
`--demo` also files a demo session turn on the `scripted` backend and prints its output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from agentrun import conf
from agentrun.auth import issue_api_key
from agentrun.models import ApiKey
from agentrun.task_queues import TaskQueue

LOCAL_TENANT = "local"


class Command(BaseCommand):
    help = "Run the control plane: API, Celery worker with beat, local launcher."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default=os.environ.get("AGENTRUN_BIND", "127.0.0.1:8000"))
        parser.add_argument("--no-worker", action="store_true", help="serve the API only")
        parser.add_argument("--demo", action="store_true", help="file a demo turn once up")

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        url = f"http://{options['addr']}"
        # Children use the same database and find the API; they must not start their own.
        os.environ["DATABASE_URL"] = settings.DATABASE_URL
        os.environ.setdefault("AGENTRUN_API_URL", url)
        self._announce(url)
        # SIGTERM ends the server like Ctrl-C does, so the worker is stopped on the way out.
        signal.signal(signal.SIGTERM, _interrupt)
        worker = None if options["no_worker"] else self._start_worker()
        if options["demo"]:
            threading.Thread(target=self._demo, args=(url,), daemon=True).start()
        try:
            call_command("runserver", options["addr"], use_reloader=False, skip_checks=True)
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(timeout=20)

    def _announce(self, url: str) -> None:
        source = "embedded" if conf.database_embedded() else "DATABASE_URL"
        self.stdout.write(f"database: {settings.DATABASES['default']['NAME']} ({source})")
        if not ApiKey.objects.filter(tenant_id=LOCAL_TENANT, role="client").exists():
            issued = issue_api_key(tenant_id=LOCAL_TENANT, role="client", name="local")
            self.stdout.write(
                f"client key for tenant {LOCAL_TENANT!r} (shown once): {issued.secret}"
            )
        self.stdout.write(f"API: {url}/api/v1/   schema: {url}/api/schema   admin: {url}/admin/")

    def _start_worker(self) -> subprocess.Popen[bytes]:
        data_dir = conf.data_dir()
        for folder in ("celery/queue", "celery/processed", "celery/control"):
            (data_dir / folder).mkdir(parents=True, exist_ok=True)
        queues = ",".join(["celery", *(queue.value for queue in TaskQueue)])
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "agentrun",
                "worker",
                "--beat",
                "--schedule",
                str(data_dir / "celerybeat-schedule"),
                "--queues",
                queues,
                "--pool",
                "threads",
                "--concurrency",
                "4",
                "--loglevel",
                "INFO",
            ]
        )

    def _demo(self, url: str) -> None:
        call_command("seed_demo", "--wait", "60", "--api-url", url)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
