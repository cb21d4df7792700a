"""The raw SQL of adopting an original agentrun database (ops/adoption.py, ops/adoption_keys.py).

Raw because it reads the catalog (which objects the original left on a table), rewrites
jsonb keys inside the database (a batch of a big events table is one UPDATE, not a round
trip per row), keeps its own progress table (which must exist before any of our
migrations run, and only in an adopted database) and moves sequences. Table and column
names come from the code, never from input, hence the file-wide S608 exception.
"""

# ruff: noqa: S608

from __future__ import annotations

from typing import Any

PROGRESS_TABLE = "agentrun_adoption_progress"

CREATE_PROGRESS = f"""
CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (
  step text PRIMARY KEY,
  last_key text NOT NULL DEFAULT '',
  done boolean NOT NULL DEFAULT false,
  rows_changed bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
)
"""
ADD_STEP = f"INSERT INTO {PROGRESS_TABLE} (step) VALUES (%s) ON CONFLICT (step) DO NOTHING"
PENDING_STEPS = f"SELECT step, last_key FROM {PROGRESS_TABLE} WHERE NOT done"
ALL_STEPS = f"SELECT step, last_key, done, rows_changed FROM {PROGRESS_TABLE} ORDER BY step"
ADVANCE_STEP = (
    f"UPDATE {PROGRESS_TABLE} SET last_key = %s, done = %s, "
    "rows_changed = rows_changed + %s, updated_at = now() WHERE step = %s"
)

# Constraints other than the primary key (foreign keys, unique, check, exclusion): the
# original's names and definitions, replaced by ours.
CONSTRAINT_NAMES = """
SELECT conname FROM pg_constraint
WHERE conrelid = %s::regclass AND contype IN ('f', 'u', 'c', 'x')
"""
# Indexes that back no constraint (a unique constraint's index goes with it).
STANDALONE_INDEX_NAMES = """
SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
WHERE x.indrelid = %s::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
"""
INDEX_NAMES = (
    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s"
)
COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
"""
TABLE_EXISTS = "SELECT to_regclass(%s) IS NOT NULL"

# A jsonb object's keys from camelCase to snake_case (`sessionId` → `session_id`). Where both
# spellings are present the snake_case one wins: it is aggregated last.
_SNAKE = "lower(regexp_replace(e.key, '([a-z0-9])([A-Z])', '\\1_\\2', 'g'))"


def snake_keys(column: str) -> str:
    return (
        f"CASE WHEN jsonb_typeof({column}) = 'object' THEN COALESCE((SELECT "
        "jsonb_object_agg(s.snake, s.value ORDER BY s.native) FROM (SELECT "
        f"{_SNAKE} AS snake, e.value, e.key = {_SNAKE} AS native FROM jsonb_each({column}) e) s),"
        f" '{{}}'::jsonb) ELSE {column} END"
    )


def has_camel_keys(column: str) -> str:
    return (
        f"(jsonb_typeof({column}) = 'object' AND EXISTS "
        f"(SELECT 1 FROM jsonb_object_keys({column}) k WHERE k ~ '[a-z0-9][A-Z]'))"
    )


def batch_end(table: str, key: str) -> str:
    """The last key of the next batch after `%s`, `%s` rows long (NULL: nothing left)."""
    return (
        f"SELECT max({key}) FROM (SELECT {key} FROM {table} WHERE {key} > %s "
        f"ORDER BY {key} LIMIT %s) batch"
    )


def convert_keys(table: str, key: str, columns: tuple[str, ...]) -> str:
    """Rewrite the camelCase keys of `columns` in the rows with key in (%s, %s]."""
    sets = ", ".join(f"{column} = {snake_keys(column)}" for column in columns)
    touched = " OR ".join(has_camel_keys(column) for column in columns)
    return f"UPDATE {table} SET {sets} WHERE {key} > %s AND {key} <= %s AND ({touched})"


# A sequence continues after the highest value stored with it (an original database may
# hold versions its sequence never handed out, e.g. rows copied from another database).
def continue_sequence(sequence: str, table: str, column: str) -> str:
    return (
        f"SELECT setval('{sequence}', GREATEST(COALESCE((SELECT max({column}) FROM {table}), 0),"
        f" (SELECT last_value FROM {sequence}), 1), true)"
    )


def rows(cursor: Any, sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    cursor.execute(sql, params)
    return list(cursor.fetchall())
