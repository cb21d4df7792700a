"""Query counts per operation: the first thing to read when a figure misses its goal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext


def captured(operation: Callable[[], Any]) -> dict[str, Any]:
    """Run `operation` once; return its statement count and the statements (shortened)."""
    with CaptureQueriesContext(connection) as context:
        operation()
    statements = [q["sql"] for q in context.captured_queries]
    return {
        "count": len(statements),
        "statements": [_short(sql) for sql in statements],
    }


def _short(sql: str) -> str:
    head = sql.split(" FROM ")[0] if sql.startswith('SELECT "') else sql
    if sql.startswith('SELECT "') and " FROM " in sql:
        table = sql.split(" FROM ")[1].split()[0]
        tail = " FOR UPDATE" if "FOR UPDATE" in sql else ""
        return f"SELECT <cols> FROM {table} …{tail}"  # noqa: S608 (a label, never executed)
    return head[:140]
