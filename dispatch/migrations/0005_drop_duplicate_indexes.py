"""No duplicate indexes on the dispatch intents table (issue 18, bench cells 3 and 6).

An intent is inserted and updated (claimed, then settled) as its command is dispatched;
each version outside a HOT update writes an entry into every index. Of its 15 entries per
dispatched intent, 8 went into indexes that duplicate others. Dropped here:

- The `text_pattern_ops` copies (`*_like`) Django adds beside the index of a text primary
  key or unique column, for `LIKE 'prefix%'` lookups: `id` and `command_id`. Nothing makes
  such a lookup: no `__startswith` on them, no raw `LIKE`, and the admin searches them by
  exact value (`=`).
- The run foreign key's own index and its `_like` copy: `agentrun_rdi_run_state_idx`
  (run_id, state) leads with run_id, so it serves every lookup by run and the cascade of a
  run's delete (`db_index=False` on the field; `AlterField` drops both).

That halves the intents' index entries, which is what cell 6's pinned snapshot keeps from
being pruned. The `AlterField` recreates the foreign key without its database action, so
`database_on_delete` runs again after it, either way (see agentrun/db_schema.py). The
outbox dropped its copies the same way in its 0002.
"""

import django.db.models.deletion
from django.db import migrations, models

from agentrun.db_schema import database_on_delete, drop_like_indexes

TABLE = "agentrun_runner_dispatch_intents"
LIKE_INDEXES = {
    "agentrun_runner_dispatch_intents_id_295771f5_like": "id",
    "agentrun_runner_dispatch_intents_command_id_152dcc01_like": "command_id",
}


# The foreign keys' `ON DELETE` after the `AlterField`, forwards and (before it) backwards.
_ON_DELETE = database_on_delete("dispatch").code


class Migration(migrations.Migration):
    dependencies = [
        ("dispatch", "0004_intent_insert_notify"),
        ("runs", "0011_drop_duplicate_indexes"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, _ON_DELETE),
        migrations.AlterField(
            model_name="runnerdispatchintent",
            name="run",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="dispatch_intents",
                to="runs.run",
            ),
        ),
        migrations.RunPython(_ON_DELETE, migrations.RunPython.noop),
        *drop_like_indexes({name: (TABLE, column) for name, column in LIKE_INDEXES.items()}),
    ]
