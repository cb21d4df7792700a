"""The run list's `search` matches the session title and the lane again, as the seed's
`listRuns` did (issue 17 item 4): the trigram index is rebuilt on the new search text."""

import django.contrib.postgres.indexes
from django.db import migrations

import runs.models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_schema_fidelity"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="run", name="agentrun_runs_search_idx"),
        migrations.AddIndex(
            model_name="run",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    runs.models.run_search_document(), name="gin_trgm_ops"
                ),
                name="agentrun_runs_search_idx",
            ),
        ),
    ]
