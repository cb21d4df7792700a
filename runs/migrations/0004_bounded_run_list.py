"""Indexes that keep `GET /runs` from growing with a tenant's history (issue 16): the
list's sorts within a tenant and across tenants, and a trigram index on the search text
(pg_trgm is a trusted extension, shipped with PostgreSQL's contrib and with the embedded
server; a database owner may create it)."""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models

import runs.models

# The search text as this migration built it: today's without what 0007 added.
SEARCH_FIELDS_0004 = tuple(
    name
    for name in runs.models.RUN_SEARCH_FIELDS
    if name not in {"session_ref__metadata__title", "trace_sink__lane"}
)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0003_live_runs_index"),
    ]

    operations = [
        TrigramExtension(),
        migrations.RemoveIndex(model_name="run", name="agentrun_runs_tenant_idx"),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["tenant_id", "-updated_at", "-id"], name="agentrun_runs_tenant_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["-updated_at", "-id"], name="agentrun_runs_recent_idx"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["tenant_id", "status", "-updated_at", "-id"],
                name="agentrun_runs_tstatus_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["tenant_id", "id"], name="agentrun_runs_tenant_id_idx"),
        ),
        migrations.AddIndex(
            model_name="run",
            index=django.contrib.postgres.indexes.GinIndex(
                django.contrib.postgres.indexes.OpClass(
                    runs.models.run_search_document(SEARCH_FIELDS_0004), name="gin_trgm_ops"
                ),
                name="agentrun_runs_search_idx",
            ),
        ),
    ]
