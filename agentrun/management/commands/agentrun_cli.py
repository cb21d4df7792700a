"""`manage.py agentrun_cli`: drive a session from a terminal, over the HTTP API.

    agentrun_cli turn SESSION "fix the flaky test" [--backend scripted] [--tail]
    agentrun_cli steer SESSION "also update the changelog"
    agentrun_cli cancel SESSION
    agentrun_cli tail SESSION          # follow the session's output (long-poll)

The API URL and a client key come from AGENTRUN_API_URL and AGENTRUN_API_KEY.
"""

from __future__ import annotations

import json
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runner.client import ApiClient, ApiError, ApiUnavailable

OUTPUT_TYPES = {
    "user_message",
    "agent_message",
    "tool_call",
    "tool_output",
    "file_change",
    "error",
    "terminal_status",
}


class Command(BaseCommand):
    help = "Drive an agentrun session from a terminal: turn, steer, cancel, tail."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["turn", "steer", "cancel", "tail"])
        parser.add_argument("session")
        parser.add_argument("text", nargs="?", default="")
        parser.add_argument("--backend", default="scripted")
        parser.add_argument("--project", default="cli")
        parser.add_argument("--workspace", default=os.getcwd())
        parser.add_argument("--tail", action="store_true", help="follow the output after a turn")
        parser.add_argument(
            "--api-url", default=os.environ.get("AGENTRUN_API_URL", "http://127.0.0.1:8000")
        )
        parser.add_argument("--key", default=os.environ.get("AGENTRUN_API_KEY"))

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["key"]:
            raise CommandError("set AGENTRUN_API_KEY (a client key) or pass --key")
        api = ApiClient(options["api_url"], options["key"])
        session = options["session"]
        try:
            if options["action"] == "turn":
                self._turn(api, session, options)
            elif options["action"] == "steer":
                self._print(
                    api.post(f"/sessions/{session}/steer", {"payload": {"text": options["text"]}})
                )
            elif options["action"] == "cancel":
                self._print(api.post(f"/sessions/{session}/cancel", {}))
            if options["action"] == "tail" or options["tail"]:
                self._tail(api, session)
        except (ApiError, ApiUnavailable) as error:
            raise CommandError(str(error)) from error

    def _turn(self, api: ApiClient, session: str, options: dict[str, Any]) -> None:
        body = {
            "run": {
                "project_id": options["project"],
                "workspace_ref": {"path": options["workspace"]},
                "provider_id": "cli",
                "backend_profile": options["backend"],
            },
            "command": {"payload": {"text": options["text"]}},
        }
        answer = api.post(f"/sessions/{session}/turns", body)
        self.stdout.write(
            f"{answer['disposition']}: run {answer['run']['id']}, turn {answer['command']['id']}"
        )

    def _tail(self, api: ApiClient, session: str) -> None:
        """Follow the session's current run until its terminal status."""
        summary = api.get(f"/sessions/{session}")
        run_id = summary["active_run_id"] or summary["last_run_id"]
        after = 0
        while run_id:
            page = api.get(f"/runs/{run_id}/events", after_seq=after, limit=200, wait=25)
            for event in page["items"]:
                if event["type"] in OUTPUT_TYPES:
                    self.stdout.write(_render(event))
                if event["type"] == "terminal_status":
                    return
            after = page["next_after_seq"]

    def _print(self, answer: Any) -> None:
        self.stdout.write(json.dumps(answer, indent=2))


def _render(event: dict[str, Any]) -> str:
    payload = event["payload"]
    text = payload.get("text") or payload.get("output") or payload.get("message")
    if event["type"] == "tool_call":
        text = f"{payload.get('tool')} {json.dumps(payload.get('arguments'))}"
    if event["type"] == "terminal_status":
        text = payload.get("terminal_status")
    return f"[{event['seq']:>4}] {event['type']}: {text}"
