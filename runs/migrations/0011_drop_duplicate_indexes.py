"""No duplicate indexes on the events and runner jobs tables (issue 18, bench cells 3 and 6).

Each index entry is written on insert and, for a non-HOT update, again per row version;
a dispatched intent wrote 32 entries in 25 indexes, 17 of them into 13 indexes that
duplicate others. Dropped here:

- The `text_pattern_ops` copies (`*_like`) Django adds beside the index of a text primary
  key, unique or indexed column, for `LIKE 'prefix%'` lookups: `agentrun_events.id`,
  `agentrun_runner_jobs.id` and `.command_id`. Nothing makes such a lookup: no
  `__startswith` on them, no raw `LIKE`, and the admin searches them by exact value (`=`).
- The run foreign key's own index (and its `_like` copy) on both tables: the event's
  unique `(run_id, seq)` and the runner job's `(run_id, command_id, created_at)` lead with
  run_id, so they serve every lookup by run and the cascades of a run's delete
  (`db_index=False` on the field; `AlterField` drops both).

The `AlterField` recreates the foreign key without its database action, so
`database_on_delete` runs again after it, either way (see agentrun/db_schema.py). The
outbox dropped its copies the same way in its 0002. Fewer entries per dispatched intent
also means fewer dead entries for cell 6's pinned snapshot to keep from being pruned.
"""

import django.db.models.deletion
from django.db import migrations, models

from agentrun.db_schema import database_on_delete, drop_like_indexes

LIKE_INDEXES = {
    "agentrun_events_id_0999591b_like": ("agentrun_events", "id"),
    "agentrun_runner_jobs_id_cac22e99_like": ("agentrun_runner_jobs", "id"),
    "agentrun_runner_jobs_command_id_ff0a4848_like": ("agentrun_runner_jobs", "command_id"),
}


# The foreign keys' `ON DELETE` after the `AlterField`, forwards and (before it) backwards.
_ON_DELETE = database_on_delete("runs").code


class Migration(migrations.Migration):
    dependencies = [("runs", "0010_session_runs_order_index")]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _ON_DELETE),
        migrations.AlterField(
            model_name="event",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="runs.run",
            ),
        ),
        migrations.AlterField(
            model_name="runnerjob",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="runner_jobs",
                to="runs.run",
            ),
        ),
        migrations.RunPython(_ON_DELETE, migrations.RunPython.noop),
        *drop_like_indexes(LIKE_INDEXES),
    ]
