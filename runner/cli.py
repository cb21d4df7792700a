"""`python -m runner` (installed as `agentrun`): the runner and the terminal client.

    agentrun run --run RUN_ID [--api-url URL] [--token KEY] [--lease-ms N] [--runner-id ID]
    agentrun turn|steer|cancel|tail SESSION [TEXT] [--tail] [--api-url URL] [--key KEY]

`run` is the reference runner, as both launchers start it: the API base URL and the
run-scoped runner key come from `AGENTRUN_API_URL` and `AGENTRUN_RUNNER_KEY` (or the flags),
and its exit status is 0 finished, 3 cancelled, 4 lease or API lost; its last line on stdout
says which. The session actions (`terminal.py`) use a client key from `AGENTRUN_API_KEY`.
Missing configuration and API errors exit 1. No Django here: the runner loads nothing of
the server, so it needs no database and no server settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from runner.client import ApiClient, ApiError, ApiUnavailable
from runner.loop import Runner
from runner.terminal import drive_session

EXIT_USAGE = 1
SESSION_ACTIONS = {
    "turn": "file a turn on a session (creates it if new)",
    "steer": "steer the session's running turn",
    "cancel": "cancel the session's current run",
    "tail": "follow the session's output (SSE, resumed after a drop) until its run ends",
}


class UsageError(Exception):
    """Exit 1 with a message: a required setting is missing, or (for the session actions)
    the API refused the request or could not be reached."""


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """`run`'s options; `manage.py runner` declares the same ones."""
    parser.add_argument("--run", dest="run_id", required=True)
    parser.add_argument("--api-url", default=os.environ.get("AGENTRUN_API_URL"))
    parser.add_argument("--token", default=os.environ.get("AGENTRUN_RUNNER_KEY"))
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--runner-id", default=os.environ.get("AGENTRUN_RUNNER_ID"))


def run_runner(options: Mapping[str, Any], out: TextIO) -> int:
    """Run one run's commands to the end; the exit status. Errors: `UsageError`."""
    if not options["api_url"] or not options["token"]:
        raise UsageError("set AGENTRUN_API_URL and AGENTRUN_RUNNER_KEY (or --api-url, --token)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    runner = Runner(
        ApiClient(options["api_url"], options["token"]),
        options["run_id"],
        lease_ms=options["lease_ms"],
        runner_id=options["runner_id"],
    )
    code = runner.run()
    reason = f" ({runner.stop_reason})" if runner.stop_reason else ""
    out.write(f"runner {runner.runner_id}: run {options['run_id']} -> exit {code}{reason}\n")
    out.flush()
    return code


def _add_session_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session")
    parser.add_argument("text", nargs="?", default="")
    parser.add_argument("--backend", default="scripted")
    parser.add_argument("--project", default="cli")
    parser.add_argument("--workspace", default=os.getcwd())
    parser.add_argument("--tail", action="store_true", help="follow the output after a turn")
    parser.add_argument("--follow", action="store_true", help="tail: keep following across turns")
    parser.add_argument(
        "--api-url", default=os.environ.get("AGENTRUN_API_URL", "http://127.0.0.1:8000")
    )
    parser.add_argument("--key", default=os.environ.get("AGENTRUN_API_KEY"))


def build_parser() -> argparse.ArgumentParser:
    """The parser; defaults are read from the environment when it is built."""
    parser = argparse.ArgumentParser(
        prog="agentrun", description="The agentrun runner and terminal client."
    )
    actions = parser.add_subparsers(dest="action", required=True)
    add_run_arguments(actions.add_parser("run", help="run one run's commands (the runner)"))
    for action, summary in SESSION_ACTIONS.items():
        _add_session_arguments(actions.add_parser(action, help=summary))
    return parser


def _drive(options: dict[str, Any], out: TextIO) -> int:
    if not options["key"]:
        raise UsageError("set AGENTRUN_API_KEY (a client key) or pass --key")
    try:
        drive_session(ApiClient(options["api_url"], options["key"]), options, out)
    except (ApiError, ApiUnavailable) as error:
        raise UsageError(str(error)) from error
    return 0


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """The console script: parse, run one action, return the exit status."""
    options = vars(build_parser().parse_args(argv))
    stdout = out or sys.stdout
    try:
        if options["action"] == "run":
            return run_runner(options, stdout)
        return _drive(options, stdout)
    except UsageError as error:
        sys.stderr.write(f"agentrun {options['action']}: {error}\n")
        return EXIT_USAGE
