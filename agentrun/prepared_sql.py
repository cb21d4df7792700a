"""A hot path's statements: prepared, run on the psycopg connection, and the BEGIN of the
outermost block's transaction in the first one's round trip (`execute_hot`; several
statements in one string, `execute_hot_sets`), with the plan settings of a transaction
that runs them (`GENERIC_PLANS`, `INDEX_PLANS`) and their plans made again every
`REPLAN_AFTER` runs.

`agentrun.raw_sql` runs every other raw statement (through Django's cursor); this module
is the part of it that only the measured hot paths use: a runner's append (`runs.sql`,
`runs.locks`' run lock through `raw_sql.read_models(hot=…)`) and a dispatch batch (its
claim with keys, `dispatch.locks`; its settle's locks and write,
`runs.locks.lock_runs_and_commands`; its events statement, `runs.sql`) and a runner's
heartbeat (`runs.locks.extend_live_lease`).
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg.pq import ExecStatus, TransactionStatus

if TYPE_CHECKING:  # `raw_sql` imports this module
    from agentrun.raw_sql import Params

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


# The planner settings of a transaction that runs prepared statements, sent after its
# BEGIN (`execute_hot(before=…)`, `execute_hot_sets(before=…)`); `SET LOCAL` ends with it.
#
# GENERIC_PLANS: PostgreSQL plans a prepared statement's first five executions for their
# arguments and only then weighs a generic plan, which it may keep declining (a runner's
# append's session `= ANY($n)` is read as ten rows where a custom plan sees one); every
# hot statement here has the same plan whatever its arguments (keys, JSON texts, a time),
# so it asks for the generic plan at once, planned once per connection.
#
# INDEX_PLANS: that plan is made once, maybe while a table is small (a new deployment, a
# bench's first batch), and kept while the table grows, as long as no ANALYZE invalidates
# it (the bench runs with autovacuum off). What is cheapest over ten rows is a scan of
# every row later: a batch's events statement went 0.09 -> 1.97 ms per call with a
# sequential scan of the events so chosen, and with sequential scans priced out, the
# claim's UPDATE joined its ten due rows by hashing a full index scan of every intent
# (bench cell 6: 6,100 rows per claim 12 s in, 9 ms a claim). A hot statement finds each
# row by its key: so its plan is made of index lookups only, each row of the outer side
# looked up in the inner side's index (a nested loop), at any table size. No bitmap scan
# either: a bitmap gives its rows in page order, so the claim, planned when the statistics
# said a handful of intents were due, read every due intent and sorted them for each batch
# of ten (2,810 rows, 112 ms a claim, in a 16-thread drain, tenth round) where walking the
# due index in order stops after ten.
GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan;\n"
INDEX_PLANS = (
    "SET LOCAL enable_seqscan = off;\n"
    "SET LOCAL enable_bitmapscan = off;\n"
    "SET LOCAL enable_hashjoin = off;\n"
    "SET LOCAL enable_mergejoin = off;\n"
)


@dataclass(frozen=True)
class Prepared:
    """A statement run by `execute_hot`: prepared on a connection that runs it twice."""

    name: str  # `<label>_<digest of the text>`: each text its own statement
    sql: str  # as given, `%s` or `%(key)s` placeholders
    prepare_sql: str  # `PREPARE <name> AS <sql with $n placeholders>`
    execute_sql: str  # `EXECUTE <name>(%s, …)`, bound client side
    keys: tuple[str, ...]  # `sql`'s `%(key)s` names, in the order of the EXECUTE's `%s`
    replan_after: int | None = None  # runs on one plan before it is made again (REPLAN_AFTER)

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
def prepared(label: str, sql: str, *, replan_after: int | None = None) -> Prepared:
    """`sql` as a `Prepared` statement. Its parameters' types are PostgreSQL's reading of
    the statement: each placeholder must be cast, or used where its type is plain.
    `replan_after`: for a statement whose plan depends on the tables' sizes, how many runs
    a plan serves before it is made again (`REPLAN_AFTER`); by default it serves the
    connection's life (until PostgreSQL invalidates it)."""
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
        name,
        sql,
        f"PREPARE {name} AS {body}",
        f"EXECUTE {name}{arguments}",
        tuple(keys),
        replan_after,
    )


# Per open connection (a new one has none; a pooled one keeps its own between lends): how
# many times each statement ran unprepared (0, 1), or UNPREPARED for good (its PREPARE's
# string failed: whether the PREPARE took is unknown, so the name is never sent again on
# that connection), or PREPARED less the times it ran since its PREPARE.
_uses: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()
UNPREPARED, PREPARED = -1, -2
# How many times a prepared statement whose plan depends on the tables' sizes runs on one
# plan before it is prepared again (`DEALLOCATE` and `PREPARE` in front of its `EXECUTE`;
# `prepared(…, replan_after=REPLAN_AFTER)`). Its plan is made once, for the tables as they
# were (their statistics, and their size then): with autovacuum off (the bench), or before
# it has analysed a table that grew, nothing would make it again. A batch settle's write
# planned while the intents were a few hundred found them through the partial index of
# every open intent, not by their keys, and kept doing so as that index filled with the
# dead entries of the intents dispatched since (bench cell 6: 0.37 of PgQueuer's figure;
# 0.98 so). Made again every REPLAN_AFTER runs, its plan follows the tables' growth, for
# one planning per REPLAN_AFTER runs (~0.3 ms). Only such a statement: a new plan is a
# planning in that run's latency (a claim's, in a pickup's p99, bench cell 4), and the
# others' plans, index lookups by key (`INDEX_PLANS`), are the same at any size.
REPLAN_AFTER = 32


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


def _send(db: BaseDatabaseWrapper, cursor: Any, text: str, params: Params | None) -> None:
    """Send `text` on `cursor` (a psycopg cursor of `db`'s connection), as Django's cursor
    would: through its wrapper when queries are logged or wrapped, else checked and with
    its errors translated."""
    if db.queries_logged or db.execute_wrappers:
        wrapped = db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
        wrapped.execute(text, params)
    else:
        db.validate_no_broken_transaction()
        with db.wrap_database_errors:
            cursor.execute(text, params)


def _run(db: BaseDatabaseWrapper, cursor: Any, text: str, params: Params) -> list[Any]:
    """`text` on `cursor` (a psycopg cursor of `db`'s connection); its last result's rows."""
    _send(db, cursor, text, params)
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
        with beginning(db, begins=begins) as begin:
            text = f"BEGIN;\n{text}" if begin else text
            rows = _run(db, hot.cursor, head + text, params)
    except BaseException:
        if preparing:
            uses[statement.name] = UNPREPARED
        raise
    if preparing:
        uses[statement.name] = PREPARED
    return rows


def execute_hot_sets(
    db: BaseDatabaseWrapper,
    statements: Sequence[tuple[Prepared, Params]],
    *,
    begins: bool = False,
    before: str = "",
    commits: bool = False,
) -> list[list[tuple[Any, ...]]]:
    """Several statements, each as `execute_hot` runs one (as it is, then PREPARE and
    EXECUTE, then EXECUTE), in one simple-query string; every row each returned, in
    order. PostgreSQL runs them in order, in the caller's transaction, each with its own
    snapshot as if sent one by one, and stops at the first that fails (the error is
    raised). Every statement must return rows (a `SELECT`, a `RETURNING`): the rows are
    told from the PREPAREs' and the BEGIN's results by their status. `begins`: the
    outermost block's BEGIN in front of them, as `execute_hot` does it (a batch
    settle's locks, `runs.locks.lock_runs_and_commands`); `before`, statements sent after
    it (the transaction's plan settings); `commits`, with that BEGIN the string ends with
    the COMMIT too, and the caller's block then finds the transaction ended and sends
    nothing (the claim with keys, a transaction of its own in one round trip,
    `dispatch.locks`). Each piece is bound client side on its own (`mogrify`): one
    piece's parameters may be named, another's positional."""
    hot = _hot_of(db)
    pieces, preparing = [], []
    for statement, params in statements:
        text, arguments, prepares = _text_to_send(hot.uses, statement, params, "")
        with db.wrap_database_errors:
            pieces.append(hot.cursor.mogrify(text, arguments))
        if prepares:
            preparing.append(statement.name)
    try:
        with beginning(db, begins=begins) as begin:
            text = before + ";\n".join(pieces)
            if begin:
                text = f"BEGIN;\n{text};\nCOMMIT" if commits else f"BEGIN;\n{text}"
            found = _run_sets(db, hot.cursor, text)
    except BaseException:
        for name in preparing:
            hot.uses[name] = UNPREPARED
        raise
    for name in preparing:
        hot.uses[name] = PREPARED
    assert len(found) == len(statements), "one row set per statement"
    return found


def _run_sets(db: BaseDatabaseWrapper, cursor: Any, text: str) -> list[list[tuple[Any, ...]]]:
    """`text` (bound) on `cursor`, as `_run` sends it; the rows of each of its results that
    has rows."""
    _send(db, cursor, text, None)
    found = []
    with db.wrap_database_errors:
        while True:
            result = cursor.pgresult
            if result is not None and result.status == ExecStatus.TUPLES_OK:
                found.append(cursor.fetchall())
            if not cursor.nextset():
                return found


def _text_to_send(
    uses: dict[str, int], statement: Prepared, params: Params, before: str
) -> tuple[str, Params, bool]:
    """The text of this use of `statement` on the connection of `uses`, its parameters,
    and whether it prepares it."""
    used = uses.get(statement.name, 0)
    replan = statement.replan_after
    if used <= PREPARED and (replan is None or PREPARED - used < replan - 1):  # PREPARE ran 1
        if replan is not None:
            uses[statement.name] = used - 1
        return before + statement.execute_sql, statement.arguments(params), False
    if used <= PREPARED:  # its plan is `replan_after` runs old: planned again
        text = f"{before}DEALLOCATE {statement.name};\n{statement.prepare_sql};\n"
        return text + statement.execute_sql, statement.arguments(params), True
    if used == 1:
        text = f"{before}{statement.prepare_sql};\n{statement.execute_sql}"
        return text, statement.arguments(params), True
    if used != UNPREPARED:
        uses[statement.name] = used + 1
    return statement.sql, params, False


@contextmanager
def beginning(db: BaseDatabaseWrapper, *, begins: bool) -> Iterator[bool]:
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
