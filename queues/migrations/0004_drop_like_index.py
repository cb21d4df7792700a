"""No `LIKE` copy of the queue task id index (issue 18).

A queue task is inserted once and updated as it is claimed and settled; its `updated_at`
is indexed, so those updates are not HOT and write an entry into every index of the table.
Django adds a `text_pattern_ops` copy (`*_like`) beside the primary key of a text column
for `LIKE 'prefix%'` lookups; nothing makes one on the task id (the admin searches it by
exact value, `=`), so it is dropped, as the runs app's 0011 and 0012 dropped theirs.
"""

from django.db import migrations

from agentrun.db_schema import drop_like_indexes

NAME = "agentrun_queue_tasks_id_ee9945b9_like"


class Migration(migrations.Migration):
    dependencies = [("queues", "0003_schema_fidelity")]

    operations = drop_like_indexes({NAME: ("agentrun_queue_tasks", "id")})
