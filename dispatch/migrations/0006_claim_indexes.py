"""The claim's due index holds only intents waiting for a claim (issue 18, cells 3 and 6).

`agentrun_rdi_due_open_idx` held every open intent, `dispatching` ones included, so that
the claim could take an expired lease by the same walk. It cost every claim the entries
of the intents in flight (a live entry each, whose heap row the claim read to find the
lease unexpired: ten claimers of ten walked up to a hundred), and under a pinned snapshot
(cell 6) two dead entries per dispatched intent, the pending version's and the claimed
one's, which no scan can mark dead while the snapshot lives.

Now the due index is `pending` and `retry` only, and a claimed intent is found by its
lease's expiry in an index of its own, which the claim's rescue reads first
(`dispatch.locks`): an expired lease is given back (`retry`) and claimed in the same
transaction, as the seed's claim took it again. The lease index's predicate names the
lease (`IS NOT NULL`) so that only a condition on the lease can use it: with the state
alone it also matched the settle's compare-and-set (`state = 'dispatching'`), which the
planner then answered by reading every claimed intent, dead versions included, instead of
the ten by their keys (bench cell 6). The new indexes are built before the old one is
dropped, so claims keep an index throughout.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dispatch", "0005_drop_duplicate_indexes"),
        ("runs", "0012_drop_more_duplicate_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="runnerdispatchintent",
            index=models.Index(
                condition=models.Q(("state__in", ("pending", "retry"))),
                fields=["next_attempt_at", "created_at"],
                name="agentrun_rdi_due_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="runnerdispatchintent",
            index=models.Index(
                condition=models.Q(("lease_expires_at__isnull", False), ("state", "dispatching")),
                fields=["lease_expires_at"],
                name="agentrun_rdi_lease_idx",
            ),
        ),
        migrations.RemoveIndex(
            model_name="runnerdispatchintent",
            name="agentrun_rdi_due_open_idx",
        ),
    ]
