"""Schema fidelity with the seed (issue 17, item 10): database defaults, the version index
with `updated_at` again, the partial index on `storage_pvc_name`, and the read cursors'
`ON DELETE CASCADE` in the database (agentrun/db_schema.py)."""

from django.db import migrations, models

from agentrun.db_schema import EMPTY_OBJECT, alter_fields, database_on_delete

STATES = [("idle", "Idle"), ("running", "Running"), ("terminal", "Terminal")]
KINDS = [("none", "None"), ("local", "Local"), ("pvc", "Pvc"), ("evicted", "Evicted")]
EMPTY = models.JSONField(db_default=EMPTY_OBJECT, default=dict)


class Migration(migrations.Migration):
    dependencies = [("agent_sessions", "0002_session_version_sequence")]

    operations = [
        migrations.RemoveIndex(model_name="session", name="agentrun_sessions_version_idx"),
        *alter_fields(
            "session",
            codex_rollout_subdir=models.TextField(db_default="sessions", default="sessions"),
            execution_state=models.TextField(choices=STATES, db_default="idle", default="idle"),
            last_event_seq=models.IntegerField(db_default=0, default=0),
            metadata=EMPTY,
            storage_kind=models.TextField(choices=KINDS, db_default="none", default="none"),
            summary=EMPTY,
            version=models.BigIntegerField(db_default=1, default=1),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                fields=["version", "-updated_at"], name="agentrun_sessions_version_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="session",
            index=models.Index(
                condition=models.Q(storage_pvc_name__isnull=False),
                fields=["storage_pvc_name"],
                name="agentrun_sess_storage_pvc_idx",
            ),
        ),
        database_on_delete("agent_sessions"),
    ]
