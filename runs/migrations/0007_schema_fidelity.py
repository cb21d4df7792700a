"""Schema fidelity with the seed (issue 17, item 10): database defaults for the columns the
seed gives one (and for `lease_epoch` and `policy_ceiling`, which an older manager does not
write), the seed's `agentrun_runs_session_idx` (the keyed turn replay's lookup) and the
database-level `ON DELETE` actions of the foreign keys (agentrun/db_schema.py)."""

import django.db.models.fields.json
from django.db import migrations, models

from agentrun.db_schema import database_on_delete


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_runner_tenant"),
    ]

    operations = [
        migrations.AlterField(
            model_name="backend",
            name="policy_ceiling",
            field=models.JSONField(
                blank=True,
                db_default=models.Value({}, output_field=models.JSONField()),
                default=dict,
            ),
        ),
        migrations.AlterField(
            model_name="cancelrequest",
            name="metadata",
            field=models.JSONField(
                db_default=models.Value({}, output_field=models.JSONField()), default=dict
            ),
        ),
        migrations.AlterField(
            model_name="command",
            name="cancel_epoch",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="lease",
            name="lease_epoch",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="run",
            name="cancel_epoch",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="run",
            name="lease_epoch",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="runner",
            name="metadata",
            field=models.JSONField(
                db_default=models.Value({}, output_field=models.JSONField()), default=dict
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                django.db.models.fields.json.KeyTransform("session_id", "session_ref"),
                models.OrderBy(models.F("updated_at"), descending=True),
                name="agentrun_runs_session_idx",
            ),
        ),
        database_on_delete("runs"),
    ]
