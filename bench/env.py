"""The benchmark's environment: its own database, loopback only, facts about the machine.

`configure()` runs before Django is imported: it points agentrun at `agentrun_bench` (never
the development or test databases), keeps Celery's filesystem broker in a scratch folder,
and quiets per-request INFO logs. `prepare_database()` creates and migrates the database;
`reset_tables()` empties agentrun's tables between cells (the seeded backend profiles
stay); `vacuum_analyze()` runs before each cell, as the issue asks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "results"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/agentrun_bench"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

# The server settings every result is read against (recorded in latest.json).
RECORDED_SETTINGS = (
    "synchronous_commit",
    "fsync",
    "wal_sync_method",
    "commit_delay",
    "shared_buffers",
    "effective_cache_size",
    "work_mem",
    "max_connections",
    "max_wal_size",
    "checkpoint_timeout",
    "wal_level",
    "full_page_writes",
    "autovacuum",
    "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor",
    "random_page_cost",
    "jit",
)


def database_url() -> str:
    url = os.environ.get("AGENTRUN_BENCH_DATABASE_URL", DEFAULT_URL)
    host = urlsplit(url).hostname or ""
    if host not in LOOPBACK:
        sys.exit(f"bench: the database must be on loopback, not {host!r}")
    return url


def url_for(name: str) -> str:
    """The bench server's URL with another database name (`postgres`, the growth DB)."""
    parts = urlsplit(database_url())
    return urlunsplit(parts._replace(path="/" + name))


def database_name() -> str:
    return urlsplit(database_url()).path.lstrip("/")


def configure() -> dict[str, str]:
    """Set the environment agentrun reads (before `django.setup()`); return it for children."""
    data_dir = Path(tempfile.mkdtemp(prefix="agentrun-bench-"))
    for folder in ("celery/queue", "celery/processed"):
        (data_dir / folder).mkdir(parents=True, exist_ok=True)
    env = {
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "agentrun.settings",
        "AGENTRUN_DATA_DIR": str(data_dir),
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
        # Intents name a launch profile, never a launcher (issue 16): `noop` is the bench's.
        "AGENTRUN_LAUNCH_PROFILES": '{"noop": {"launcher": "noop"}}',
    }
    os.environ.update(env)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return env


def admin_connect(dbname: str | None = None) -> Any:
    import psycopg

    return psycopg.connect(url_for(dbname or database_name()), autocommit=True)


def drop_database(name: str) -> None:
    with admin_connect("postgres") as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def prepare_database(name: str | None = None) -> None:
    """Create the bench database if needed and migrate it (`manage.py migrate`)."""
    name = name or database_name()
    with admin_connect("postgres") as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url_for(name)}
    # --skip-checks: other apps may be mid-change in the tree; the schema is what matters.
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--skip-checks", "-v", "0"],
        check=True,
        env=env,
        cwd=ROOT,
    )


def agentrun_tables(conn: Any) -> list[str]:
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        " AND tablename LIKE 'agentrun%%' AND tablename <> 'agentrun_backends'"
    ).fetchall()
    return [row[0] for row in rows]


def reset_tables(dbname: str | None = None) -> None:
    """Empty agentrun's tables (not the seeded backend profiles) and the peers' schemas."""
    with admin_connect(dbname) as conn:
        tables = agentrun_tables(conn)
        if tables:
            conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")


def vacuum_analyze(dbname: str | None = None) -> None:
    with admin_connect(dbname) as conn:
        conn.execute("VACUUM ANALYZE")


def machine_facts() -> dict[str, Any]:
    with admin_connect() as conn:
        version = conn.execute("SELECT version()").fetchone()[0]
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in RECORDED_SETTINGS}
        connections = conn.execute("SELECT count(*) FROM pg_stat_activity").fetchone()[0]
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return {
        "postgres_version": version,
        "postgres_settings": settings,
        "connections_in_use_at_start": connections,
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "git_head": head,
        "database": database_name(),
    }


@contextmanager
def bench_database(name: str) -> Iterator[None]:
    """Run a block against another database of the bench server: this process's Django
    connections, the raw connections and every worker process started inside it."""
    previous = os.environ.get("AGENTRUN_BENCH_DATABASE_URL")
    os.environ["AGENTRUN_BENCH_DATABASE_URL"] = url_for(name)
    os.environ["DATABASE_URL"] = url_for(name)
    try:
        with using_database(name):
            yield
    finally:
        if previous is None:
            os.environ.pop("AGENTRUN_BENCH_DATABASE_URL", None)
        else:
            os.environ["AGENTRUN_BENCH_DATABASE_URL"] = previous
        os.environ["DATABASE_URL"] = database_url()


@contextmanager
def using_database(name: str) -> Iterator[None]:
    """Point Django's default connection at another database of the bench server.

    Every Django connection wrapper shares the alias's settings dict, so changing NAME and
    closing the open connections sends the next query (in any thread) to `name`.
    """
    from django.db import connections

    settings = connections.settings["default"]
    previous = settings["NAME"]
    connections.close_all()
    settings["NAME"] = name
    try:
        yield
    finally:
        connections.close_all()
        settings["NAME"] = previous
