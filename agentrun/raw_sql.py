"""Running one raw statement: the round trip that every app's SQL module makes.

The apps keep their raw SQL in one named module each (`outbox/sql.py`, `webhooks/sql.py`,
their `locks.py` for the statements that lock), with a comment saying why it is raw; what
those modules do with the connection is the same, and is spelled here once.

- `fetch_rows` runs a statement and returns every row it gave back (a `SELECT` or an
  `INSERT`/`UPDATE … RETURNING`);
- `fetch_row_sets` runs several statements in one round trip and returns each one's rows
  (with the outermost block's BEGIN in front of them when they are its first: a batch
  settle's locks);
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
- `execute_hot` runs a hot path's statement prepared (SQL `PREPARE`/`EXECUTE`, from a
  connection's second use of it on), and a transaction's first statement with the BEGIN
  in front of it: a runner's append (see there). It runs on the psycopg connection, not
  through Django's cursor wrapper.
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DEFERRED, Field, Model
from psycopg.pq import ExecStatus, TransactionStatus

Params = Mapping[str, Any] | Sequence[Any]
M = TypeVar("M", bound=Model)


def fetch_rows(sql: str, params: Params) -> list[tuple[Any, ...]]:
    """Run `sql` on the default connection; every row it returned."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def fetch_row_sets(
    statements: Sequence[tuple[str, Params]], *, begins: bool = False
) -> list[list[tuple[Any, ...]]]:
    """Run several statements in one round trip; every row each returned, in order. Each
    is bound client side (`mogrify`, as every statement here is) and they are sent as one
    simple-query string: PostgreSQL runs them in order, in the caller's transaction, each
    with its own snapshot as if sent one by one, and stops at the first that fails (the
    error is raised). Every statement must return rows (a `SELECT`, a `RETURNING`).
    `begins`: when they are the first of the outermost atomic block's transaction, its
    `BEGIN` goes in front of them, as `execute_hot` does it (a batch settle's locks)."""
    with connection.cursor() as cursor:
        text = ";\n".join(cursor.mogrify(sql, params) for sql, params in statements)
        with _beginning(cursor.db, begins=begins) as begin:
            cursor.execute(f"BEGIN;\n{text}" if begin else text)
        if begin:
            cursor.nextset()  # past the BEGIN's result
        found = [list(cursor.fetchall())]
        while cursor.nextset():
            found.append(list(cursor.fetchall()))
    assert len(found) == len(statements), "one row set per statement"
    return found


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


# --- a hot path's statements: prepared, and the BEGIN in the first one's round trip -----
#
# Why: a runner's single-event append is three statements (its run lock, the events
# statement, the COMMIT with the NOTIFY), and sent as Django sends them they cost twice
# the server CPU of the same transaction in plain psycopg (bench cell 1, issue 18): 42 %
# of the backend's time went to parsing, analysing and planning them again on every call
# (the events statement's plan alone ~0.3 ms), which psycopg's own prepared statements
# spare the reference, and BEGIN was a round trip of its own. Django binds parameters
# client side and never prepares (`prepare_threshold` is None, so that poolers in
# transaction mode work; agentrun's README asks for session mode), so these statements
# are prepared in SQL: `PREPARE <name> AS …` once per connection, then `EXECUTE
# <name>(…)`, the arguments bound client side as every other statement's.
#
# They run on the psycopg connection under Django's, not through Django's cursor: once the
# server's work was cut so, the client's was what was left, and Django's cursor wrapper and
# connection proxy were ~15 % of an append's Python CPU (a cursor and its wrapper made and
# closed per statement, a proxy lookup and an async-safety check per call; bench cell 1,
# issue 18, eighth round). What of Django's cursor matters is kept:
# the same error translation (`wrap_database_errors`, so a failure is Django's
# `DatabaseError` and marks the connection as Django's would), the refusal in a broken
# transaction, the health check and connect; with queries logged (DEBUG, a test's
# `CaptureQueriesContext`) or an execution wrapper installed, the statement goes through
# Django's wrapper of the same cursor, so the log and the wrappers see it as any other.


def default_connection() -> BaseDatabaseWrapper:
    """This thread's connection of the default database, looked up once: a hot path passes
    it on (each `django.db.connection.<attribute>` is a lookup of its own)."""
    return connections[DEFAULT_DB_ALIAS]


@dataclass(frozen=True)
class Prepared:
    """A statement run by `execute_hot`: prepared on a connection that runs it twice."""

    name: str  # `<label>_<digest of the text>`: each text its own statement
    sql: str  # as given, `%s` or `%(key)s` placeholders
    prepare_sql: str  # `PREPARE <name> AS <sql with $n placeholders>`
    execute_sql: str  # `EXECUTE <name>(%s, …)`, bound client side
    keys: tuple[str, ...]  # `sql`'s `%(key)s` names, in the order of the EXECUTE's `%s`

    def arguments(self, params: Params) -> Params:
        """The EXECUTE's parameters: `params` by position (binding a mapping by name cost
        psycopg twice as much as a list)."""
        if not self.keys:
            return params
        assert isinstance(params, Mapping)
        return [params[key] for key in self.keys]


_NAMED = re.compile(r"%\((\w+)\)s")
_POSITIONAL = re.compile(r"(?<!%)%s")


@cache
def prepared(label: str, sql: str) -> Prepared:
    """`sql` as a `Prepared` statement. Its parameters' types are PostgreSQL's reading of
    the statement: each placeholder must be cast, or used where its type is plain."""
    name = f"{label}_{hashlib.blake2s(sql.encode(), digest_size=6).hexdigest()}"
    keys: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in keys:
            keys.append(match.group(1))
        return f"${keys.index(match.group(1)) + 1}"

    body = _NAMED.sub(number, sql)
    count = len(keys)
    if not keys:
        count = len(_POSITIONAL.findall(sql))
        numbers = iter(range(1, count + 1))
        body = _POSITIONAL.sub(lambda _: f"${next(numbers)}", sql)
    arguments = f"({', '.join(['%s'] * count)})" if count else ""
    # The PREPARE goes in the same string as the EXECUTE (bound with its parameters), so
    # its own `%%` stay as they are.
    return Prepared(
        name, sql, f"PREPARE {name} AS {body}", f"EXECUTE {name}{arguments}", tuple(keys)
    )


# Per open connection (a new one has none; a pooled one keeps its own between lends): how
# many times each statement ran unprepared, or PREPARED, or UNPREPARED for good (its
# PREPARE's string failed: whether the PREPARE took is unknown, so the name is never sent
# again on that connection).
_uses: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
PREPARED, UNPREPARED = -1, -2


@dataclass
class _Hot:
    """The psycopg connection that Django's connection has open, one cursor of it (reused
    by every hot statement) and the connection's `_uses`."""

    raw: Any
    cursor: Any
    uses: dict[str, int]


# Keyed by Django's connection object (one per thread and alias), not by the psycopg
# connection, which the cursor refers to (a weak key must not be referred to by its own
# value). A new psycopg connection (a reconnect, another one lent by the pool) is seen by
# `raw` no longer being Django's.
_hot: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Hot] = weakref.WeakKeyDictionary()


def _hot_of(db: BaseDatabaseWrapper) -> _Hot:
    """`db`'s connection, opened (and health-checked) as Django's `cursor()` does."""
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = db.connection
    hot = _hot.get(db)
    if hot is None or hot.raw is not raw:
        uses = _uses.get(raw)
        if uses is None:
            uses = _uses.setdefault(raw, {})
        with db.wrap_database_errors:
            hot = _hot[db] = _Hot(raw, db.create_cursor(), uses)
    return hot


def _run(db: BaseDatabaseWrapper, cursor: Any, text: str, params: Params) -> list[Any]:
    """`text` on `cursor` (a psycopg cursor of `db`'s connection); its last result's rows."""
    if db.queries_logged or db.execute_wrappers:
        wrapped = db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
        wrapped.execute(text, params)
    else:
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            cursor.execute(text, params)
    with db.wrap_database_errors:
        while cursor.nextset():  # BEGIN's, `before`'s and PREPARE's results come first
            pass
        # The result's status, not `description` (which builds a column object per column).
        result = cursor.pgresult
        return cursor.fetchall() if result and result.status == ExecStatus.TUPLES_OK else []


def execute_hot(
    db: BaseDatabaseWrapper,
    statement: Prepared,
    params: Params,
    *,
    begins: bool = False,
    before: str = "",
    head: str = "",
) -> list[tuple[Any, ...]]:
    """Run `statement` on `db`'s psycopg connection, as Django's cursor would but without its
    wrapper (see above), in one round trip; the rows of the string's last statement. Per
    connection: the first time as it is; the second, `PREPARE` then `EXECUTE` in one
    string (so a connection opened per request never pays a PREPARE it will not use
    again); from then on `EXECUTE`. `before`: statements for the same string, sent only
    with a prepared one (`runs.sql`'s plan mode). `head`: statements sent in front of it
    every time (`runs.sql`'s COMMIT before its NOTIFY).

    `begins`: when the statement is the first of the outermost atomic block's
    transaction, `BEGIN` goes in front of it. psycopg starts a Django block's transaction
    lazily, by a `BEGIN` round trip of its own just before the block's first statement
    (it sends one when the connection is not in autocommit and idle); here that statement
    carries it. psycopg is put in autocommit for it (allowed while idle, no round trip),
    so it sends no BEGIN, and the server's transaction block is open when the string
    ends. Until that transaction ends the flag changes nothing (psycopg only reads it when
    idle); Django's block still owns the transaction and commits or rolls back at its end
    as ever (psycopg's `commit()` and `rollback()` follow the server's transaction
    status, not the flag), then puts the connection in autocommit itself. Only that first
    statement carries a BEGIN: inside a caller's transaction (a savepoint, a test's block)
    the connection is not idle, and the statement runs as it is. If the string fails
    before its BEGIN took (the connection still idle), the flag is put back."""
    hot = _hot_of(db)
    uses = hot.uses
    text, params, preparing = _text_to_send(uses, statement, params, before)
    try:
        with _beginning(db, begins=begins) as begin:
            text = f"BEGIN;\n{text}" if begin else text
            rows = _run(db, hot.cursor, head + text, params)
    except BaseException:
        if preparing:
            uses[statement.name] = UNPREPARED
        raise
    if preparing:
        uses[statement.name] = PREPARED
    return rows


def _text_to_send(
    uses: dict[str, int], statement: Prepared, params: Params, before: str
) -> tuple[str, Params, bool]:
    """The text of this use of `statement` on the connection of `uses`, its parameters,
    and whether it prepares it."""
    used = uses.get(statement.name, 0)
    if used == PREPARED:
        return before + statement.execute_sql, statement.arguments(params), False
    if used == 1:
        text = f"{before}{statement.prepare_sql};\n{statement.execute_sql}"
        return text, statement.arguments(params), True
    if used != UNPREPARED:
        uses[statement.name] = used + 1
    return statement.sql, params, False


@contextmanager
def _beginning(db: BaseDatabaseWrapper, *, begins: bool) -> Iterator[bool]:
    """Whether the string sent inside carries the outermost block's `BEGIN` (see
    `execute_hot`): when `begins` and it is that block's first statement, psycopg is put in
    autocommit for it, and put back if the string failed before its BEGIN took."""
    raw = db.connection
    begin = begins and _first_of_outermost_block(db, raw)
    if begin:
        raw.autocommit = True
    try:
        yield begin
    finally:
        if begin and raw.info.transaction_status == TransactionStatus.IDLE:
            raw.autocommit = False  # the BEGIN did not take: psycopg sends its own


def _first_of_outermost_block(db: BaseDatabaseWrapper, raw: Any) -> bool:
    """Whether psycopg would send a BEGIN before the connection's next statement for the
    outermost atomic block (and a plain one: no isolation level or access mode set)."""
    return (
        raw is not None
        and db.in_atomic_block
        and len(db.atomic_blocks) == 1
        and not db.savepoint_ids
        and db.commit_on_exit
        and not raw.autocommit
        and raw.info.transaction_status == TransactionStatus.IDLE
        and raw.isolation_level is None
        and raw.read_only is None
        and raw.deferrable is None
    )
