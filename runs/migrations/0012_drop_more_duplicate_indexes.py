"""No duplicate indexes on the commands, runs, leases and runners tables (issue 18, cells 3, 6, 9).

0011 dropped the duplicates of the events and runner jobs tables; these four are written on
the same hot paths: a turn's admission inserts a run and a command, a dispatch settles the
command and claims the run's lease, and each non-HOT update of a run (its `updated_at` is
indexed) writes an entry into every index of the table. Dropped here, as in 0011:

- The `text_pattern_ops` copies (`*_like`) Django adds beside the index of a text primary
  key or indexed column: `agentrun_commands.id` and `.run_id`, `agentrun_runs.id`,
  `agentrun_leases.run_id`, `agentrun_runners.id`. Nothing makes a `LIKE 'prefix%'`
  lookup on them: no `__startswith`, no raw `LIKE`, and the admin searches them by exact
  value (`=`).
- The command's run foreign key's own index: the unique `(run_id, seq)` leads with run_id,
  so it serves every lookup by run and the cascade of a run's delete (`db_index=False` on
  the field; `AlterField` drops it and its `_like` copy).

The `AlterField` recreates the foreign key without its database action, so
`database_on_delete` runs again after it, either way (see agentrun/db_schema.py).
"""

import django.db.models.deletion
from django.db import migrations, models

from agentrun.db_schema import database_on_delete, drop_like_indexes

LIKE_INDEXES = {
    "agentrun_commands_id_be3afde2_like": ("agentrun_commands", "id"),
    "agentrun_runs_id_fbc2551d_like": ("agentrun_runs", "id"),
    "agentrun_leases_run_id_8136f9f6_like": ("agentrun_leases", "run_id"),
    "agentrun_runners_id_92c49fcf_like": ("agentrun_runners", "id"),
}


# The foreign keys' `ON DELETE` after the `AlterField`, forwards and (before it) backwards.
_ON_DELETE = database_on_delete("runs").code


class Migration(migrations.Migration):
    dependencies = [("runs", "0011_drop_duplicate_indexes")]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _ON_DELETE),
        migrations.AlterField(
            model_name="command",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="commands",
                to="runs.run",
            ),
        ),
        migrations.RunPython(_ON_DELETE, migrations.RunPython.noop),
        *drop_like_indexes(LIKE_INDEXES),
    ]
