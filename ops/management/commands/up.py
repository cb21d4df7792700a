"""`manage.py up` (what `make run` starts): the whole control plane, supervised.

- the database: `DATABASE_URL`, or, when it is unset, the embedded PostgreSQL: `up` then
  runs itself again under `python -m agentrun.embedded_db exec --`, which starts (or
  attaches to) the server in `AGENTRUN_DATA_DIR` and stops it when `up` ends;
- migrations and `collectstatic` (whitenoise serves the admin's CSS and JS from there);
- three supervised children (`ops.supervisor`): the API server (`ops.server.server_argv`,
  the command a production deployment runs), a Celery worker (which also runs the local
  launcher: dispatched turns start runner processes) and Celery beat; the broker is the
  database itself unless `CELERY_BROKER_URL` names another (`agentrun.broker`).

It prints a short banner: the URLs, the database and broker in use (no passwords) and,
the first time, a client API key for tenant `local`. `--demo` also files a demo session
turn on the `scripted` backend and prints its output.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from kombu.utils.url import maybe_sanitize_url

from agentrun import conf
from agentrun.auth import issue_api_key
from agentrun.models import ApiKey
from agentrun.task_queues import TaskQueue
from ops.server import server_argv
from ops.supervisor import Policy, Supervisor

LOCAL_TENANT = "local"
log = logging.getLogger("agentrun.up")


class Command(BaseCommand):
    help = "Run the control plane: API server, Celery worker and beat, supervised."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default=os.environ.get("AGENTRUN_BIND", "127.0.0.1:8000"))
        parser.add_argument("--no-worker", action="store_true", help="serve the API only")
        parser.add_argument("--demo", action="store_true", help="file a demo turn once up")
        parser.add_argument(
            "--server-workers",
            type=int,
            default=int(os.environ.get("AGENTRUN_SERVER_WORKERS", "1")),
            help="API server processes",
        )

    def run_from_argv(self, argv: list[str]) -> None:
        if not os.environ.get("DATABASE_URL"):
            # Start the embedded PostgreSQL before anything touches the database.
            wrapper = [sys.executable, "-m", "agentrun.embedded_db", "exec", "--"]
            os.execv(sys.executable, [*wrapper, sys.executable, *argv])
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        conf.data_dir().mkdir(parents=True, exist_ok=True)
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        host, _, port = options["addr"].rpartition(":")
        url = f"http://{options['addr']}"
        os.environ.setdefault("AGENTRUN_API_URL", url)  # where runners find the API
        self._banner(url)
        children = {
            "server": server_argv(host=host, port=int(port), workers=options["server_workers"])
        }
        if not options["no_worker"]:
            children |= {"worker": _worker_argv(), "beat": _beat_argv()}
        supervisor = Supervisor(
            children,
            env=os.environ,
            state_path=conf.data_dir() / "up-state.json",
            policy=Policy(backoff_base_s=conf.supervisor_restart_base_s()),
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: supervisor.stop())
        if options["demo"]:
            threading.Thread(target=self._demo, args=(url,), daemon=True).start()
        if supervisor.run() != 0:
            raise CommandError(f"{supervisor.gave_up} kept dying: agentrun stopped")

    def _banner(self, url: str) -> None:
        lines = [
            f"agentrun up: API {url}/api/v1/   admin {url}/admin/   docs {url}/api/schema",
            f"  database: {_database_description()}",
            f"  broker:   {_broker_description()}",
        ]
        if not ApiKey.objects.filter(tenant_id=LOCAL_TENANT, role="client").exists():
            issued = issue_api_key(tenant_id=LOCAL_TENANT, role="client", name="local")
            lines.append(f"  client key for tenant {LOCAL_TENANT!r} (shown once): {issued.secret}")
        self.stdout.write("\n".join(lines))
        self.stdout.flush()

    def _demo(self, url: str) -> None:
        call_command("seed_demo", "--wait", "60", "--api-url", url)


def _database_description() -> str:
    db = settings.DATABASES["default"]
    if conf.database_embedded():
        return f"embedded PostgreSQL in {conf.data_dir() / 'pgdata'} ({db['NAME']})"
    return f"{db.get('HOST') or 'localhost'}:{db.get('PORT') or 5432}/{db['NAME']}"


def _broker_description() -> str:
    broker = str(settings.CELERY_BROKER_URL)
    if broker.startswith("agentrun-sqla+"):
        return "the database above (kombu SQLAlchemy transport; CELERY_BROKER_URL unset)"
    return str(maybe_sanitize_url(broker))


def _worker_argv() -> list[str]:
    queues = ",".join(["celery", *(queue.value for queue in TaskQueue)])
    concurrency = os.environ.get("AGENTRUN_WORKER_CONCURRENCY", "4")
    return [
        *_celery(),
        "worker",
        "--queues", queues,
        "--pool", "threads",
        "--concurrency", concurrency,
        "--hostname", "worker@%h",
        "--loglevel", settings.LOG_LEVEL,
    ]  # fmt: skip


def _beat_argv() -> list[str]:
    schedule = conf.data_dir() / "celerybeat-schedule"
    return [*_celery(), "beat", "--schedule", str(schedule), "--loglevel", settings.LOG_LEVEL]


def _celery() -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "agentrun"]
