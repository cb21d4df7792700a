"""The API server's command line, the same under `manage.py up` and in production.

A minimal version (uvicorn on `agentrun.asgi`); the server chosen by measurement replaces
it with the same signature.
"""

from __future__ import annotations

import sys


def server_argv(*, host: str, port: int, workers: int) -> list[str]:
    argv = [sys.executable, "-m", "uvicorn", "agentrun.asgi:application"]
    argv += ["--host", host, "--port", str(port)]
    return argv + (["--workers", str(workers)] if workers > 1 else [])
