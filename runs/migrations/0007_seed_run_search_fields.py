"""The run list's `search` matches the session title and the lane again, as the seed's
`listRuns` did (issue 17 item 4): the trigram index is rebuilt on the new search text."""

import django.contrib.postgres.indexes
from django.db import migrations

import runs.models

# Frozen here, so a later change of the search text needs (and gets) its own migration.
SEARCH_FIELDS_0007 = (
    "id",
    "project_id",
    "backend_profile",
    "provider_id",
    "workspace_ref__path",
    "session_ref__session_id",
    "session_ref__metadata__title",
    "trace_sink__task_id",
    "trace_sink__lane",
    "failure_kind",
    "failure_message",
)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0006_runner_tenant"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="run", name="agentrun_runs_search_idx"),
        migrations.AddIndex(
            model_name="run",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    runs.models.run_search_document(SEARCH_FIELDS_0007), name="gin_trgm_ops"
                ),
                name="agentrun_runs_search_idx",
            ),
        ),
    ]
