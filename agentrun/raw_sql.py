"""Running one raw statement: the round trip that every app's SQL module makes.

The apps keep their raw SQL in one named module each (`outbox/sql.py`, `webhooks/sql.py`,
their `locks.py` for the statements that lock), with a comment saying why it is raw; what
those modules do with the connection is the same, and is spelled here once.

- `fetch_rows` runs a statement and returns every row it gave back (a `SELECT` or an
  `INSERT`/`UPDATE … RETURNING`);
- `row_count` runs a statement and returns how many rows it changed;
- `json_param` is the spelling of a batch bound as one JSON text: the connection binds
  parameters client side, and quoting one string costs less than quoting thousands of
  array elements (measured on the relay's and the writer's batches).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection

Params = Mapping[str, Any] | Sequence[Any]


def fetch_rows(sql: str, params: Params) -> list[tuple[Any, ...]]:
    """Run `sql` on the default connection; every row it returned."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def row_count(sql: str, params: Params) -> int:
    """Run `sql` on the default connection; how many rows it wrote."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def json_param(value: Any) -> str:
    """A batch as one JSON text, for a `%(name)s::jsonb` parameter (see module doc)."""
    return json.dumps(value)
