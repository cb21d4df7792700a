"""The sessions app's raw SQL: writing a locked session row's changed columns.

Why raw: every session projection write (a turn's start and end, a claim, a steer, a
thread report) ends in this one UPDATE, and turn admission is its measured hot path (bench
cell 9, issue 18). The ORM's `save(update_fields=…)` compiled the same statement at ~1 ms
of CPU per call; this builds it once per set of columns and binds the values the model
fields prepare, so the JSON columns are adapted exactly as the ORM adapts them.

The caller holds the row lock (`sessions.locks`), so the statement waits for nobody, and
it writes only the columns it is given: `last_event_seq`, which event appends advance in
their own statement (`runs.sql.insert_events`), is never among them.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field

from sessions.models import Session


def update_session_columns(session: Session, fields: Iterable[str]) -> None:
    """`UPDATE agentrun_sessions SET <fields> = <the instance's values> WHERE session_id`.
    Needs the caller's transaction and the session row lock."""
    names = tuple(sorted(set(fields)))
    sql, model_fields = _update_shape(names)
    params = [
        field.get_db_prep_save(getattr(session, field.attname), connection)
        for field in model_fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, session.session_id])


@cache
def _update_shape(names: tuple[str, ...]) -> tuple[str, list[Field[Any, Any]]]:
    """The statement for one set of columns, and their model fields (in the same order)."""
    by_name = {field.name: field for field in Session._meta.concrete_fields}
    fields = [by_name[name] for name in names]
    assert all(not field.primary_key and field.name != "last_event_seq" for field in fields)
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in fields)
    table = quote(Session._meta.db_table)
    # Column and table names come from the model, never from input.
    sql = f"UPDATE {table} SET {assignments} WHERE session_id = %s"  # noqa: S608
    return sql, fields
