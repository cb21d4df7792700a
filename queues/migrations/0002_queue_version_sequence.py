"""The global task version sequence (seed migration 004)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("queues", "0001_initial")]

    operations = [
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS agentrun_queue_version_seq;",
            "DROP SEQUENCE IF EXISTS agentrun_queue_version_seq;",
        ),
    ]
