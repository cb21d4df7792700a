"""Storage settings and indexes of the outbox table, for the relay (bench cell 7).

- fillfactor 70: the claim only sets lease columns, which no index covers, so with room
  left on the heap page PostgreSQL updates the row in place (a HOT update: no new index
  entries). A claim of 500 then reads and writes about a third fewer buffers. It applies
  to pages written from now on (no table rewrite).
- No `text_pattern_ops` copies of the `id` and `run_id` indexes: Django adds them to text
  columns for `LIKE 'prefix%'` lookups, which nothing here makes (the admin searches by
  exact id). Marking a record delivered changes an indexed column, so each settle wrote an
  entry into every index: 7 per record, now 5.
- autovacuum at 1 % (+1,000 rows): every delivered record leaves a dead row version and a
  dead entry in the pending key-order index, which the claim's skip scan steps over until
  a vacuum removes it; with the default 20 % a week of retained records lets millions
  pile up between vacuums.
"""

from django.db import migrations

from agentrun.db_schema import drop_like_indexes

TABLE = "agentrun_kafka_event_outbox"


class Migration(migrations.Migration):
    dependencies = [("outbox", "0001_initial")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE {TABLE} SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, "
            "autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02)",
            f"ALTER TABLE {TABLE} RESET (fillfactor, autovacuum_vacuum_scale_factor, "
            "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor)",
        ),
        *drop_like_indexes(
            {
                "agentrun_kafka_event_outbox_id_1b18c119_like": (TABLE, "id"),
                "agentrun_kafka_event_outbox_run_id_b0ca2a86_like": (TABLE, "run_id"),
            }
        ),
    ]
