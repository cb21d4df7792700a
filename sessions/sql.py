"""The sessions app's raw SQL: reading a session row, writing a locked one's changed columns.

Why raw: every session projection write (a turn's start and end, a claim, a steer, a
thread report) ends in this one UPDATE, and turn admission is its measured hot path (bench
cell 9, issue 18). The ORM's `save(update_fields=…)` compiled the same statement at ~1 ms
of CPU per call; this builds it once per set of columns and binds the values the model
fields prepare, so the JSON columns are adapted exactly as the ORM adapts them.

The caller holds the row lock (`sessions.locks`), so the statement waits for nobody, and
it writes only the columns it is given: `last_event_seq`, which event appends advance in
their own statement (`runs.sql.insert_events`), is never among them. A visible change
draws its version in the same statement (the shared feed lock, then `nextval`, as
`agentrun.versions` orders them), one round trip where it was two.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field

from agentrun.raw_sql import read_models
from agentrun.row_inserts import InsertStatement
from agentrun.versions import SESSION_VERSIONS
from sessions.models import Session


def read_session(session_id: str) -> Session | None:
    """The session row, unlocked (what admission observes before it takes its locks): raw,
    as its lock (`sessions.locks`), a round trip without the ORM's compilation."""
    found = read_models(Session, "WHERE session_id = %s", [session_id])
    return found[0] if found else None


def update_session_columns(
    session: Session, fields: Iterable[str], *, bump: bool, lead: InsertStatement | None = None
) -> None:
    """`UPDATE agentrun_sessions SET <fields> = <the instance's values> WHERE session_id`;
    with `bump`, also a new version (`sessions.versions`), drawn in the same statement under
    the feed's shared lock and stored on the instance. Needs the caller's transaction and
    the session row lock, and comes after every other row lock the transaction takes.
    `lead`: the block's new rows (`agentrun.row_inserts`), inserted by the same statement,
    before the UPDATE (its new run and command are what the row points at; the foreign
    keys are checked at the end of the statement), and their checks read back."""
    names = tuple(sorted(set(fields) - {"version"}))
    sql, model_fields = _update_shape(names, bump)
    values = [getattr(session, field.attname) for field in model_fields]
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(model_fields, values, strict=True)
    ]
    gate = SESSION_VERSIONS.drawn_in_statement()[1] if bump else []
    params = [*gate, *params, session.session_id]
    if lead is not None:
        sql = _led_by_inserts(sql, lead, bump=bump)
        params = [*lead.params, *params, *lead.checks_params]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone() if bump or lead is not None else None
    if bump:
        assert row is not None
        session.version = row[0]
    if lead is not None:
        assert row is not None
        lead.written(row[1:])


def _led_by_inserts(sql: str, lead: InsertStatement, *, bump: bool) -> str:
    """The session UPDATE `sql` as the last CTE of a statement that first inserts `lead`'s
    rows and selects the row's version (new with `bump`), then `lead`'s check columns."""
    ctes = [lead.ctes] if lead.ctes else []
    if bump:  # `WITH locked AS (…) UPDATE …`: the shared lock is one more CTE
        assert sql.startswith("WITH ")
        head, _, update = sql[len("WITH ") :].rpartition(")\nUPDATE ")
        ctes.append(head + ")")
        update = "UPDATE " + update
    else:
        update = sql + ' RETURNING "version"'
    ctes.append(f"s AS ({update})")
    # The CTEs and checks are built from the models and the services' own text, never input.
    return f"WITH {', '.join(ctes)}\nSELECT (SELECT version FROM s), {lead.checks_sql}"  # noqa: S608


@cache
def _update_shape(names: tuple[str, ...], bump: bool) -> tuple[str, list[Field[Any, Any]]]:
    """The statement for one set of columns (and a new version, with `bump`), and the
    columns' model fields in the order of their parameters."""
    by_name = {field.name: field for field in Session._meta.concrete_fields}
    fields = [by_name[name] for name in names]
    assert all(not field.primary_key and field.name != "last_event_seq" for field in fields)
    quote = connection.ops.quote_name
    assignments = [f"{quote(str(field.column))} = %s" for field in fields]
    table = quote(Session._meta.db_table)
    if not bump:
        # Column and table names come from the model, never from input.
        sql = f"UPDATE {table} SET {', '.join(assignments)} WHERE session_id = %s"  # noqa: S608
        return sql, fields
    cte, _, next_version = SESSION_VERSIONS.drawn_in_statement()
    assignments.append(f'"version" = {next_version}')
    sql = (
        f"{cte}UPDATE {table} SET {', '.join(assignments)}"  # noqa: S608 (as above)
        ' WHERE session_id = %s AND EXISTS (SELECT FROM locked) RETURNING "version"'
    )
    return sql, fields
