"""Per-table autovacuum for the dispatch intents (keeps the claim's hot path lean).

Every intent passes through a few states and then stays terminal for good, so most of
the table is dead history and every transition leaves a dead tuple (and a dead entry in
the partial due-open index the claim scans). The defaults (vacuum at 20 % dead) let a big
table pile up millions of them between vacuums; vacuum at 1 % (+1,000 rows) and analyse
at 2 % so the planner keeps seeing how small the open set is.
"""

from django.db import migrations

TABLE = "agentrun_runner_dispatch_intents"


class Migration(migrations.Migration):
    dependencies = [("dispatch", "0001_initial")]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE {TABLE} SET (autovacuum_vacuum_scale_factor = 0.01, "
            "autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, "
            "autovacuum_vacuum_insert_scale_factor = 0.05)",
            f"ALTER TABLE {TABLE} RESET (autovacuum_vacuum_scale_factor, "
            "autovacuum_vacuum_threshold, autovacuum_analyze_scale_factor, "
            "autovacuum_vacuum_insert_scale_factor)",
        ),
    ]
