"""Adopting, in place, a database the original (TypeScript) agentrun manager created.

The original keeps the same table and column names (SPEC §1), so most of its schema is
ours already, but not all of it: a few of our columns are missing (`lease_epoch`,
`storage_path`, `dispatch`), constraints and indexes carry other names (PostgreSQL's
`agentrun_commands_run_id_seq_key` for our `agentrun_commands_run_seq_key`, …), some
indexes differ (`agentrun_runs_session_idx` reads the camelCase `sessionId`), and
Django's `migrate --fake-initial` would only skip a `CREATE TABLE` and leave all of that.

So `manage.py migrate` (ops/management/commands/migrate.py) first runs `adopt_schema()`:
for each of our apps whose initial migration is not recorded but whose tables exist, it
brings those tables to exactly what that initial migration creates, computed from the
migration state with Django's own schema editor (the test compares the catalog of an
adopted database with a fresh one):

- missing tables are created; missing columns added (existing rows get the field's
  default); existing columns get our type, nullability and (no) database default;
- the original's constraints and indexes (all but the primary key) are dropped and ours
  created under our names, foreign keys included;
- the initial migration's own SQL runs (it is written `IF NOT EXISTS`), and the migration
  is recorded as applied, in the same transaction.

Every later migration then runs as on any database (database defaults, `ON DELETE`
actions, the session index, …). Data is converted afterwards, in resumable batches
(ops/adoption_keys.py). A fresh database, or one our migrations made, has nothing to adopt:
the check is one catalog read per app.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import RunSQL
from django.db.migrations.recorder import MigrationRecorder

from ops import adoption_keys
from ops import adoption_sql as sql

# Our apps whose tables the original created, in dependency order.
ADOPTED_APPS = ("runs", "agent_sessions", "queues", "dispatch", "outbox")
INITIAL = "0001_initial"


def adopt_schema(connection: BaseDatabaseWrapper) -> list[str]:
    """Adopt the original's tables of each app in ADOPTED_APPS; the labels adopted."""
    adopted: list[str] = []
    executor = MigrationExecutor(connection)
    for label in ADOPTED_APPS:
        node = (label, INITIAL)
        if node in executor.loader.applied_migrations or node not in executor.loader.graph.nodes:
            continue
        if not _any_table_of(connection, label):
            continue  # a fresh database: no state to render
        state = executor.loader.project_state(node, at_end=True)
        app_models = [m for m in state.apps.get_models() if m._meta.app_label == label]
        with connection.cursor() as cursor:
            present = [m for m in app_models if _exists(cursor, m._meta.db_table)]
        if not present:
            continue
        _migrate_dependencies(executor, node)
        with transaction.atomic(using=connection.alias):
            _adopt_tables(connection, app_models, present)
            _run_initial_sql(connection, executor.loader.graph.nodes[node])
            MigrationRecorder(connection).record_applied(*node)
            adoption_keys.plan_conversion(connection)
        adopted.append(label)
        executor = MigrationExecutor(connection)  # the history changed
    return adopted


def _any_table_of(connection: BaseDatabaseWrapper, label: str) -> bool:
    """Whether a table of the app's models exists (our tables keep their names across
    migrations, so the current models tell)."""
    tables = [model._meta.db_table for model in apps.get_app_config(label).get_models()]
    with connection.cursor() as cursor:
        return any(_exists(cursor, table) for table in tables)


def _exists(cursor: Any, table: str) -> bool:
    return bool(sql.rows(cursor, sql.TABLE_EXISTS, [table])[0][0])


def _migrate_dependencies(executor: MigrationExecutor, node: tuple[str, str]) -> None:
    """Apply what the initial migration depends on (e.g. `runs` 0002 before `dispatch`
    0001), so the recorded history stays consistent."""
    needed = [
        parent
        for parent in executor.loader.graph.node_map[node].parents
        if parent.key not in executor.loader.applied_migrations
    ]
    if needed:
        executor.migrate([parent.key for parent in needed])


def _adopt_tables(
    connection: BaseDatabaseWrapper,
    app_models: list[type[models.Model]],
    present: list[type[models.Model]],
) -> None:
    added: dict[str, set[str | None]] = {}
    # First pass: the original's objects go, columns are made ours. `add_field` queues the
    # new columns' indexes, which the editor creates on leaving the block.
    with connection.schema_editor(atomic=False) as editor, connection.cursor() as cursor:
        for model in app_models:
            if model not in present:
                editor.create_model(model)
                continue
            table = model._meta.db_table
            _drop_original_objects(editor, cursor, table)
            columns = {row[0]: row[1:] for row in sql.rows(cursor, sql.COLUMNS, [table])}
            added[table] = set()
            for field in model._meta.local_concrete_fields:
                if field.column not in columns:
                    editor.add_field(model, field)
                    added[table].add(field.column)
                else:
                    _align_column(editor, model, field, *columns[field.column])
    # Second pass: our constraints and indexes, under our names.
    with connection.schema_editor(atomic=False) as editor, connection.cursor() as cursor:
        for model in present:
            _create_our_objects(editor, cursor, model, added[model._meta.db_table])


def _run_initial_sql(connection: BaseDatabaseWrapper, migration: Any) -> None:
    """The initial migration's own SQL (a sequence, an index Django cannot name). Each of
    these statements must be idempotent (`IF NOT EXISTS`): on an adopted database the
    original may have made the object already."""
    with connection.schema_editor(atomic=False) as editor:
        for operation in migration.operations:
            if isinstance(operation, RunSQL):
                statements = [operation.sql] if isinstance(operation.sql, str) else operation.sql
                for statement in statements:
                    sql_text, params = (
                        statement if isinstance(statement, tuple) else (statement, None)
                    )
                    editor.execute(sql_text, params)  # type: ignore[arg-type]


def _drop_original_objects(editor: Any, cursor: Any, table: str) -> None:
    quoted = editor.quote_name(table)
    for (name,) in sql.rows(cursor, sql.CONSTRAINT_NAMES, [table]):
        editor.execute(f"ALTER TABLE {quoted} DROP CONSTRAINT {editor.quote_name(name)}")
    for (name,) in sql.rows(cursor, sql.STANDALONE_INDEX_NAMES, [table]):
        editor.execute(f"DROP INDEX {editor.quote_name(name)}")


def _align_column(
    editor: Any,
    model: type[models.Model],
    field: Any,
    db_type: str,
    not_null: bool,
    default: str | None,
) -> None:
    """Our type, nullability and database default on an existing column."""
    table, column = editor.quote_name(model._meta.db_table), editor.quote_name(field.column)
    alter = f"ALTER TABLE {table} ALTER COLUMN {column}"
    wanted = field.db_type(editor.connection)
    if wanted != db_type:
        editor.execute(f"{alter} TYPE {wanted} USING {column}::{wanted}")
    if field.null and not_null:
        editor.execute(f"{alter} DROP NOT NULL")
    elif not field.null and not not_null:
        fill = editor.effective_default(field)
        fill_nulls = f"UPDATE {table} SET {column} = %s WHERE {column} IS NULL"  # noqa: S608
        editor.execute(fill_nulls, [fill])
        editor.execute(f"{alter} SET NOT NULL")
    if field.has_db_default():
        change, params = editor._alter_column_database_default_sql(model, None, field)
        editor.execute(f"ALTER TABLE {table} {change}", params)
    elif default is not None:
        editor.execute(f"{alter} DROP DEFAULT")


def _create_our_objects(
    editor: Any, cursor: Any, model: type[models.Model], added: set[str | None]
) -> None:
    """What `create_model` would have made besides the table: foreign keys, unique fields,
    field and Meta indexes, Meta constraints (not those `add_field` made already)."""
    table = model._meta.db_table
    for field in model._meta.local_concrete_fields:
        if field.column in added:
            continue
        if field.remote_field and getattr(field, "db_constraint", False):
            editor.execute(editor._create_fk_sql(model, field, "_fk_%(to_table)s_%(to_column)s"))
        if field.unique and not field.primary_key:
            # PostgreSQL's name for the inline UNIQUE of CREATE TABLE.
            name = editor.quote_name(f"{table}_{field.column}_key")
            editor.execute(
                f"ALTER TABLE {editor.quote_name(table)} ADD CONSTRAINT {name} "
                f"UNIQUE ({editor.quote_name(field.column)})"
            )
    existing = {row[0] for row in sql.rows(cursor, sql.INDEX_NAMES, [table])}
    for statement in editor._model_indexes_sql(model):
        if str(statement.parts["name"]).strip('"') not in existing:
            editor.execute(statement)
    for constraint in model._meta.constraints:
        editor.add_constraint(model, constraint)
