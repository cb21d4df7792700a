"""The API server's command line, the one `manage.py up` supervises and production runs.

uvicorn serving Django's ASGI application (agentrun/asgi.py): the event loop holds any
number of idle, slow or waiting clients at the cost of a socket each, so slow clients and
long-polls do not starve other requests (bench cell `server_load` measures it). One
function builds the argv so that `up` and a deployment cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import sys

# Between requests on a kept-alive connection; a client that keeps it longer reconnects.
KEEP_ALIVE_S = 5
# A long-poll waits at most AGENTRUN_LONG_POLL_MAX_SECONDS (30): a graceful stop lets the
# open ones answer (an empty page; the client polls again) before the process ends.
GRACEFUL_SHUTDOWN_S = 35
BACKLOG = 2048  # connections queued by the kernel before accept (uvicorn's default)


def server_argv(*, host: str, port: int, workers: int | None = None) -> list[str]:
    """`python -m uvicorn agentrun.asgi:application …` bound to host:port.

    `workers` None: one process (what `up` runs; it supervises it). A number: uvicorn's
    own supervisor forks that many processes, each with its own pool and listener, so the
    connection budget is workers * (AGENTRUN_DB_POOL_SIZE + 1).
    """
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "agentrun.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--http",
        "httptools",
        "--loop",
        "asyncio",
        "--lifespan",
        "off",  # Django speaks no lifespan protocol
        "--timeout-keep-alive",
        str(KEEP_ALIVE_S),
        "--timeout-graceful-shutdown",
        str(GRACEFUL_SHUTDOWN_S),
        "--backlog",
        str(BACKLOG),
        # Latency per route is in /metrics (agentrun.middleware.RouteLatencyMiddleware);
        # an access line per request would bury real errors under load.
        "--no-access-log",
        "--no-server-header",
    ]
    if workers is not None:
        argv += ["--workers", str(workers)]
    return argv


def main(argv: list[str] | None = None) -> None:
    """`python -m ops.server --host H --port P [--workers N]`: become the server (exec)."""
    parser = argparse.ArgumentParser(prog="python -m ops.server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    command = server_argv(host=args.host, port=args.port, workers=args.workers)
    os.execv(command[0], command)  # the server takes this process's place (and pid)


if __name__ == "__main__":
    main()
