"""Schema fidelity with the seed (issue 17, item 10): database defaults for the columns the
seed gives one (and for `lease_epoch` and `policy_ceiling`, which an older manager does not
write), the seed's `agentrun_runs_session_idx` (the keyed turn replay's lookup) and the
database-level `ON DELETE` actions of the foreign keys (agentrun/db_schema.py)."""

from django.db import migrations, models
from django.db.models.fields.json import KeyTransform

from agentrun.db_schema import EMPTY_OBJECT, alter_fields, database_on_delete

ZERO = models.IntegerField(db_default=0, default=0)
EMPTY = models.JSONField(db_default=EMPTY_OBJECT, default=dict)


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_runner_tenant")]

    operations = [
        *alter_fields(
            "backend",
            policy_ceiling=models.JSONField(blank=True, db_default=EMPTY_OBJECT, default=dict),
        ),
        *alter_fields("cancelrequest", metadata=EMPTY),
        *alter_fields("command", cancel_epoch=ZERO),
        *alter_fields("lease", lease_epoch=ZERO),
        *alter_fields("run", cancel_epoch=ZERO, lease_epoch=ZERO),
        *alter_fields("runner", metadata=EMPTY),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                KeyTransform("session_id", "session_ref"),
                models.OrderBy(models.F("updated_at"), descending=True),
                name="agentrun_runs_session_idx",
            ),
        ),
        database_on_delete("runs"),
    ]
