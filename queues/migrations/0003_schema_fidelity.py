"""Schema fidelity with the seed (issue 17, item 10): database defaults of `metadata` and
`references_json`, and `ON DELETE CASCADE` of attempts and read cursors in the database
(agentrun/db_schema.py)."""

from django.db import migrations, models

from agentrun.db_schema import EMPTY_ARRAY, EMPTY_OBJECT, alter_fields, database_on_delete


class Migration(migrations.Migration):
    dependencies = [("queues", "0002_queue_version_sequence")]

    operations = [
        *alter_fields(
            "queuetask",
            metadata=models.JSONField(db_default=EMPTY_OBJECT, default=dict),
            references=models.JSONField(
                db_column="references_json", db_default=EMPTY_ARRAY, default=list
            ),
        ),
        database_on_delete("queues"),
    ]
