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
- `row_write_sql` is one model instance's write (its changed columns, or the new row) as
  a statement to put in a data-modifying CTE, so that the writes of one step go in one
  round trip (`runs.sql.end_run`, `agentrun.row_inserts`); the values are prepared by the
  model fields, as the ORM's `save()` prepares them;
- `read_models` reads whole rows of a model into instances (`Model.from_db`), the
  statement's text built once per model: a row lock or a read on a hot path costs a
  round trip, not ~1 ms of query compilation (issue 18). A lock's `FOR UPDATE` is spelled
  by the caller, in its app's `locks.py`;
- a hot path's statement prepared (SQL `PREPARE`/`EXECUTE`, from a connection's second
  use of it on), on the psycopg connection past Django's cursor wrapper, with the BEGIN of
  the outermost block's transaction in front of the first one, is
  `agentrun.prepared_sql.execute_hot` (`read_models(hot=…)` runs a read there); several
  in one round trip, each one's rows returned (a batch settle's locks and write), is
  `agentrun.prepared_sql.execute_hot_sets`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED, Field, Model

from agentrun.prepared_sql import default_connection, execute_hot, prepared

Params = Mapping[str, Any] | Sequence[Any]
M = TypeVar("M", bound=Model)


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
class RowWrite:
    """A locked row's changed columns, written from the instance's values; without
    `fields`, a new row inserted with all of them."""

    row: Model
    fields: tuple[str, ...] | None = None


def row_write_sql(write: RowWrite) -> tuple[str, list[Any]]:
    """`UPDATE <table> SET <fields> = %s… WHERE <pk> = %s` (without fields, `INSERT INTO
    <table> (<every column>) VALUES (%s…)`) and its parameters."""
    model = type(write.row)
    if write.fields:
        sql, fields = _update_shape(model, write.fields)
        values = [getattr(write.row, field.attname) for field in fields]
    else:
        sql, fields = _insert_shape(model)
        values = [field.pre_save(write.row, add=True) for field in fields]
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(fields, values, strict=True)
    ]
    return sql, params + ([write.row.pk] if write.fields else [])


def write_ctes(writes: Sequence[RowWrite]) -> tuple[str, list[Any]]:
    """`w0 AS (<write>), w1 AS (…)`: the writes as the CTEs of one statement, and their
    parameters in order."""
    parts, params = [], []
    for index, write in enumerate(writes):
        sql, values = row_write_sql(write)
        parts.append(f"w{index} AS ({sql})")
        params += values
    return ",\n".join(parts), params


def mark_inserted(rows: Iterable[Model]) -> None:
    """The rows a raw statement inserted exist now, as after the ORM's insert (a later
    `save()` updates them)."""
    for row in rows:
        row._state.adding = False
        row._state.db = connection.alias


@cache
def _insert_shape(model: type[Model]) -> tuple[str, list[Field[Any, Any]]]:
    fields = list(model._meta.concrete_fields)
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(field.column)) for field in fields)
    holes = ", ".join(["%s"] * len(fields))
    # Column and table names come from the model, never from input.
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({holes})"  # noqa: S608
    return sql, fields


@cache
def _update_shape(model: type[Model], names: tuple[str, ...]) -> tuple[str, list[Field[Any, Any]]]:
    fields = [model._meta.get_field(name) for name in names]
    concrete = [field for field in fields if isinstance(field, Field) and field.concrete]
    assert len(concrete) == len(fields) and not any(field.primary_key for field in concrete)
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in concrete)
    pk = quote(str(model._meta.pk.column))
    # Column and table names come from the model, never from input.
    sql = f"UPDATE {quote(model._meta.db_table)} SET {assignments} WHERE {pk} = %s"  # noqa: S608
    return sql, concrete


def read_models(
    model: type[M],
    tail: str,
    params: Params,
    *,
    deferred: tuple[str, ...] = (),
    hot: str | None = None,
) -> list[M]:
    """`SELECT <every column> FROM <table> <tail>` (a `WHERE …`, an `ORDER BY`, a lock
    clause: the caller's text, never input), each row read into an instance. `deferred`
    fields are not read (left unloaded, read on access, as `QuerySet.defer` leaves them).
    `hot`: run by `execute_hot` under that label (prepared, and carrying the BEGIN of the
    outermost block's transaction when it is its first statement)."""
    sql = select_models_sql(model, tail, deferred=deferred)
    if hot:
        db = default_connection()
        rows = execute_hot(db, prepared(hot, sql), params, begins=True)
        return models_from_rows(model, rows, deferred=deferred, db=db)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return models_from_rows(model, rows, deferred=deferred)


def select_models_sql(model: type[Model], tail: str, *, deferred: tuple[str, ...] = ()) -> str:
    """`read_models`'s statement, for a caller that sends it with others in one round trip
    (and reads its rows with `models_from_rows`)."""
    columns = _select_shape(model, deferred)[0]
    # Column and table names come from the model; `tail` is the caller's own text.
    return f"SELECT {columns} FROM {connection.ops.quote_name(model._meta.db_table)} {tail}"  # noqa: S608


def model_columns(model: type[Model], *, deferred: tuple[str, ...] = ()) -> str:
    """The column list of `select_models_sql`, for a statement that returns whole rows
    another way (an UPDATE's `RETURNING`); its rows are read with `models_from_rows`."""
    return _select_shape(model, deferred)[0]


def models_from_rows(
    model: type[M],
    rows: Iterable[Sequence[Any]],
    *,
    deferred: tuple[str, ...] = (),
    db: BaseDatabaseWrapper | None = None,
) -> list[M]:
    """The rows of `select_models_sql(model, …, deferred=deferred)` as instances: what
    `model.from_db` makes of them. With deferred fields, each row is spread over the
    model's fields here, by positions worked out once per shape, where `from_db` tests
    each field's name against the loaded names on every row (a quarter of a run row's
    `from_db`; a batch settle reads one run per item, issue 18). `db`: the default
    connection, when the caller has it at hand (`default_connection`)."""
    _, names, converters = _select_shape(model, deferred)
    spread = _spread_of(model, deferred) if deferred else None
    db = db or default_connection()
    alias, found = db.alias, []
    for row in rows:
        values = list(row)
        for index, convert in converters:
            values[index] = convert(values[index], None, db)
        if spread is not None:
            all_names, positions, template = spread
            names, values, loaded = all_names, template.copy(), values
            for position, value in zip(positions, loaded, strict=True):
                values[position] = value
        found.append(model.from_db(alias, names, values))
    return found


@cache
def _spread_of(
    model: type[Model], deferred: tuple[str, ...]
) -> tuple[list[str], list[int], list[Any]]:
    """For `models_from_rows`: every field's attribute name, the position among them of
    each loaded one, and a row of `DEFERRED` (what `Model.from_db` passes for a field not
    loaded, so `__init__` leaves it unset)."""
    fields = model._meta.concrete_fields
    positions = [index for index, field in enumerate(fields) if field.name not in deferred]
    return [field.attname for field in fields], positions, [DEFERRED] * len(fields)


@cache
def _select_shape(
    model: type[Model], deferred: tuple[str, ...]
) -> tuple[str, list[str], list[tuple[int, Any]]]:
    """The columns of a whole row (but `deferred`), their attribute names, and the
    converters of the fields that convert the database's value (JSON arrives as text)."""
    fields = [field for field in model._meta.concrete_fields if field.name not in deferred]
    columns = ", ".join(connection.ops.quote_name(str(field.column)) for field in fields)
    converters = [
        (index, field.from_db_value)
        for index, field in enumerate(fields)
        if hasattr(field, "from_db_value")
    ]
    return columns, [field.attname for field in fields], converters
