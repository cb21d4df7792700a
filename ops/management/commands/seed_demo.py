"""`manage.py seed_demo [--wait SECONDS]`: file a demo session turn on `scripted`.

The turn is admitted like any client's (a session, a run, a turn command and a dispatch
intent), so it exercises the whole path: the dispatcher launches a runner, which streams
the echo back. With `--wait`, it waits for the turn to end and prints its output.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runs.models import TERMINAL_RUN_STATUSES, Event, EventType, Run, RunStatus
from runs.services.lifecycle import RunSpec
from sessions.services.admission import admit_turn
from sessions.turns import TurnRequest

DEMO_TENANT = "local"


class Command(BaseCommand):
    help = "File a demo session turn on the scripted backend and print its output."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--text", default="Hello from the agentrun demo")
        parser.add_argument("--wait", type=float, default=0, help="seconds to wait for the end")
        parser.add_argument("--api-url", default=None, help="only printed, for curl examples")

    def handle(self, *args: Any, **options: Any) -> None:
        session_id = f"demo-{uuid.uuid4().hex[:8]}"
        admission = admit_turn(
            request=TurnRequest(
                session_id=session_id,
                tenant_id=DEMO_TENANT,
                spec=RunSpec(
                    project_id="demo",
                    workspace_ref={"path": "/tmp/agentrun-demo"},
                    provider_id="local",
                    backend_profile="scripted",
                    session_ref={"session_id": session_id, "metadata": {"title": "demo"}},
                ),
                payload={"text": options["text"]},
                dispatch={},
            )
        )
        run = admission.run
        if run is None:  # a new session is idle: its first turn is never queued
            raise CommandError(f"the demo turn was {admission.disposition}, not started")
        self.stdout.write(f"demo turn filed: session {session_id}, run {run.id}")
        if options["wait"] <= 0:
            return
        status = self._wait(run.id, options["wait"])
        for event in Event.objects.filter(run_id=run.id, type=EventType.AGENT_MESSAGE).order_by(
            "seq"
        ):
            self.stdout.write(f"agent: {event.payload.get('text')}")
        self.stdout.write(f"run {run.id}: {status}")
        if status != RunStatus.COMPLETED:
            raise CommandError(f"the demo turn did not complete: {status}")

    def _wait(self, run_id: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = Run.objects.filter(pk=run_id).values_list("status", flat=True).get()
            if status in TERMINAL_RUN_STATUSES:
                return status
            time.sleep(0.25)
        return "still running after the wait"
