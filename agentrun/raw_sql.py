"""Running one raw statement: the round trip that every app's SQL module makes.

The apps keep their raw SQL in one named module each (`outbox/sql.py`, `webhooks/sql.py`,
their `locks.py` for the statements that lock), with a comment saying why it is raw; what
those modules do with the connection is the same, and is spelled here once.

- `fetch_rows` runs a statement and returns every row it gave back (a `SELECT` or an
  `INSERT`/`UPDATE … RETURNING`);
- `row_count` runs a statement and returns how many rows it changed;
- `json_param` is the spelling of a batch bound as one JSON text: the connection binds
  parameters client side, and quoting one string costs less than quoting thousands of
  array elements (measured on the relay's and the writer's batches);
- `model_rows` reads whole rows of a model from a raw statement into instances.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Model

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


@dataclass(frozen=True)
class ModelRows:
    """How a raw statement reads whole rows of one model: the column list to select and
    how to build instances from the rows, as the ORM would (`Model.from_db`, each field's
    `from_db_value`: JSON columns arrive as text). For hot reads whose ORM compilation cost
    more than their round trip (the run lock, a batch settle's locks; bench cells 1, 3)."""

    model: type[Model]
    columns: str  # quoted, in the model's field order, for `SELECT {columns} FROM …`
    attnames: list[str]
    converters: list[tuple[int, Any]]

    def build(self, rows: Sequence[Sequence[Any]]) -> list[Any]:
        built = []
        for row in rows:
            values = list(row)
            for index, convert in self.converters:
                values[index] = convert(values[index], None, connection)
            built.append(self.model.from_db(connection.alias, self.attnames, values))
        return built


@cache
def model_rows(model: type[Model], *, deferred: tuple[str, ...] = ()) -> ModelRows:
    """The `ModelRows` of `model`, without the `deferred` fields (left unloaded, read on
    access, as `QuerySet.defer` leaves them). Column names come from the model, never from
    input."""
    fields = [field for field in model._meta.concrete_fields if field.name not in deferred]
    return ModelRows(
        model=model,
        columns=", ".join(connection.ops.quote_name(str(field.column)) for field in fields),
        attnames=[field.attname for field in fields],
        converters=[
            (index, field.from_db_value)
            for index, field in enumerate(fields)
            if hasattr(field, "from_db_value")
        ],
    )
