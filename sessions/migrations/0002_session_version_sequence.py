"""The global session version sequence (seed migration 006)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0001_initial")]

    operations = [
        migrations.RunSQL(
            "CREATE SEQUENCE IF NOT EXISTS agentrun_session_version_seq;",
            "DROP SEQUENCE IF EXISTS agentrun_session_version_seq;",
        ),
    ]
