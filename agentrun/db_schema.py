"""Schema pieces the ORM cannot say by itself, shared by every app's models and migrations.

- `EMPTY_OBJECT` / `EMPTY_ARRAY`: the seed's `DEFAULT '{}'::jsonb` (and `'[]'`) as a
  database default (`db_default`), so a raw SQL writer or an older manager sharing the
  database may leave the column out (issue 17). Python code still gets a fresh value from
  `default=`, which takes precedence in the ORM.
- `database_on_delete()`: Django 5.2 emulates `on_delete` in Python and creates foreign keys
  with no database action. The seed's keys say `ON DELETE CASCADE` / `SET NULL`, which a
  raw `DELETE FROM agentrun_runs` relies on; this migration operation rewrites each foreign
  key of an app to carry its field's `on_delete` in the database too (same name, still
  deferrable). A later `AlterField` of such a key recreates it without the action: run the
  operation again in that migration.
- `drop_like_indexes()`: drops Django's `text_pattern_ops` copies (`*_like`) of text id
  indexes, which no lookup uses and every write pays for (issue 18); reversible.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

EMPTY_OBJECT = models.Value({}, output_field=models.JSONField())
EMPTY_ARRAY = models.Value([], output_field=models.JSONField())

_ACTIONS: dict[Any, str] = {models.CASCADE: "CASCADE", models.SET_NULL: "SET NULL"}

# Finds a column's foreign key by catalog, since Django names it with a hash.
_FK_NAMES = """
SELECT c.conname FROM pg_constraint c
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
WHERE c.contype = 'f' AND c.conrelid = %s::regclass AND a.attname = %s
"""


def _set_actions(app_label: str, apps: Any, schema_editor: Any, *, with_action: bool) -> None:
    quote = schema_editor.quote_name
    for model in apps.get_app_config(app_label).get_models():
        for field in model._meta.local_fields:
            action = _ACTIONS.get(getattr(field.remote_field, "on_delete", None))
            if action is None or not field.db_constraint:
                continue
            table = model._meta.db_table
            target = field.related_model._meta
            with schema_editor.connection.cursor() as cursor:
                cursor.execute(_FK_NAMES, [table, field.column])
                names = [row[0] for row in cursor.fetchall()]
            for name in names:
                on_delete = f" ON DELETE {action}" if with_action else ""
                schema_editor.execute(
                    f"ALTER TABLE {quote(table)} DROP CONSTRAINT {quote(name)}, "
                    f"ADD CONSTRAINT {quote(name)} FOREIGN KEY ({quote(field.column)}) "
                    f"REFERENCES {quote(target.db_table)} ({quote(field.target_field.column)})"
                    f"{on_delete} DEFERRABLE INITIALLY DEFERRED"
                )


def database_on_delete(app_label: str) -> migrations.RunPython:
    """The migration operation giving every foreign key of `app_label` its database action."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        _set_actions(app_label, apps, schema_editor, with_action=True)

    def backwards(apps: Any, schema_editor: Any) -> None:
        _set_actions(app_label, apps, schema_editor, with_action=False)

    return migrations.RunPython(forwards, backwards)


def alter_fields(model_name: str, **fields: Any) -> list[migrations.AlterField]:
    """`AlterField` operations for some fields of one model, written compactly in a
    migration; each operation gets its own copy of the field (Django binds a field to a
    model's state)."""
    return [
        migrations.AlterField(model_name=model_name, name=name, field=field.clone())
        for name, field in fields.items()
    ]


def drop_like_indexes(indexes: dict[str, tuple[str, str]]) -> list[migrations.RunSQL]:
    """Operations dropping each `name: (table, column)` `text_pattern_ops` index, and
    re-creating it backwards. The names are Django's (hashed), never input."""
    return [
        migrations.RunSQL(
            f"DROP INDEX IF EXISTS {name}",
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({column} text_pattern_ops)",
        )
        for name, (table, column) in indexes.items()
    ]
