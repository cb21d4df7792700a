"""Schema fidelity with the seed (issue 17, item 10): database defaults of `metadata` and
`references_json`, and `ON DELETE CASCADE` of attempts and read cursors in the database
(agentrun/db_schema.py)."""

from django.db import migrations, models

from agentrun.db_schema import database_on_delete


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0002_queue_version_sequence"),
    ]

    operations = [
        migrations.AlterField(
            model_name="queuetask",
            name="metadata",
            field=models.JSONField(
                db_default=models.Value({}, output_field=models.JSONField()), default=dict
            ),
        ),
        migrations.AlterField(
            model_name="queuetask",
            name="references",
            field=models.JSONField(
                db_column="references_json",
                db_default=models.Value([], output_field=models.JSONField()),
                default=list,
            ),
        ),
        database_on_delete("queues"),
    ]
