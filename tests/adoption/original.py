"""A database the way the original (TypeScript) manager leaves it: its migrations' DDL
(original_schema.sql) and seed-shaped rows (original_rows.sql, described there), with the
camelCase JSON and the payload-hash format it wrote. Built in a scratch database of its
own, never the test database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from django.db import connection

HERE = Path(__file__).parent
# The run spec and the queue task the rows were made from, as a client sends them today.
SPEC = {
    "project_id": "proj-1",
    "workspace_ref": {"path": "/work/repo"},
    "provider_id": "openai",
    "backend_profile": "codex",
    "execution_policy": {"sandbox": "workspace-write"},
}
TASK = {
    **SPEC,
    "queue": "default",
    "lane": "main",
    "title": "fix the bug",
    "priority": 10,
    "payload": {"text": "fix the bug"},
}


def url_of(name: str) -> str:
    params = connection.settings_dict
    return f"postgres://{params['USER']}@{params['HOST']}:{params['PORT']}/{name}"


@contextmanager
def scratch_database(suffix: str = "") -> Iterator[str]:
    """A new empty database (`test_adopt_<pid><suffix>`), dropped afterwards; its URL."""
    name = f"test_adopt_{os.getpid()}{suffix}"
    with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url_of(name)
    finally:
        with psycopg.connect(url_of("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def build(url: str, *, with_v02: bool = False) -> None:
    """The original's schema and rows in the database at `url`; `with_v02`: also the
    dispatch intent and outbox tables of its migrations 012, 013 and 015 (reconstructed)
    with a row each."""
    files = ["original_schema.sql"]
    files += ["original_v02_reconstructed.sql"] if with_v02 else []
    files += ["original_rows.sql"]
    files += ["original_v02_rows.sql"] if with_v02 else []
    with psycopg.connect(url, autocommit=True) as db:
        for name in files:
            db.execute((HERE / name).read_text())
