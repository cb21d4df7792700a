"""Runner records belong to a tenant (issue 16): another tenant's registration of the same
runner id is refused instead of overwriting the record. Existing rows take their run's
tenant."""

from django.db import migrations, models

BACKFILL = """
UPDATE agentrun_runners AS r SET tenant_id = runs.tenant_id
FROM agentrun_runs AS runs WHERE runs.id = r.run_id AND r.tenant_id IS NULL
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0005_backend_policy_ceiling")]

    operations = [
        migrations.AddField(
            model_name="runner",
            name="tenant_id",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
    ]
