"""Schema fidelity with the seed (issue 17, item 10): database defaults, the version index
with `updated_at` again, the partial index on `storage_pvc_name`, and the read cursors'
`ON DELETE CASCADE` in the database (agentrun/db_schema.py)."""

from django.db import migrations, models

from agentrun.db_schema import database_on_delete


class Migration(migrations.Migration):
    dependencies = [
        ("agent_sessions", "0002_session_version_sequence"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="session",
            name="agentrun_sessions_version_idx",
        ),
        migrations.AlterField(
            model_name="session",
            name="codex_rollout_subdir",
            field=models.TextField(db_default="sessions", default="sessions"),
        ),
        migrations.AlterField(
            model_name="session",
            name="execution_state",
            field=models.TextField(
                choices=[("idle", "Idle"), ("running", "Running"), ("terminal", "Terminal")],
                db_default="idle",
                default="idle",
            ),
        ),
        migrations.AlterField(
            model_name="session",
            name="last_event_seq",
            field=models.IntegerField(db_default=0, default=0),
        ),
        migrations.AlterField(
            model_name="session",
            name="metadata",
            field=models.JSONField(
                db_default=models.Value({}, output_field=models.JSONField()), default=dict
            ),
        ),
        migrations.AlterField(
            model_name="session",
            name="storage_kind",
            field=models.TextField(
                choices=[
                    ("none", "None"),
                    ("local", "Local"),
                    ("pvc", "Pvc"),
                    ("evicted", "Evicted"),
                ],
                db_default="none",
                default="none",
            ),
        ),
        migrations.AlterField(
            model_name="session",
            name="summary",
            field=models.JSONField(
                db_default=models.Value({}, output_field=models.JSONField()), default=dict
            ),
        ),
        migrations.AlterField(
            model_name="session",
            name="version",
            field=models.BigIntegerField(db_default=1, default=1),
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
                condition=models.Q(("storage_pvc_name__isnull", False)),
                fields=["storage_pvc_name"],
                name="agentrun_sess_storage_pvc_idx",
            ),
        ),
        database_on_delete("agent_sessions"),
    ]
