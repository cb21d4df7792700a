"""Retention: delivered records past the retention period are pruned in bounded batches;
undelivered records never are."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from outbox.models import KafkaEventOutbox
from outbox.services.prune import prune_delivered_outbox
from outbox.tasks import prune
from tests.outbox.builders import append_logs, claimed_run
from tests.outbox.relaying import outbox_drained
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.django_db(transaction=True)


def delivered_and_pending(*, old: int, recent: int, pending: int) -> None:
    """`old` records delivered 30 days ago, `recent` delivered now, `pending` undelivered."""
    run = claimed_run()
    KafkaEventOutbox.objects.all().delete()  # the run's lifecycle records: not counted here
    append_logs(run, old + recent)
    assert outbox_drained().delivered == old + recent
    old_ids = list(KafkaEventOutbox.objects.order_by("outbox_seq").values_list("id", flat=True))
    KafkaEventOutbox.objects.filter(pk__in=old_ids[:old]).update(
        delivered_at=timezone.now() - timedelta(days=30)
    )
    append_logs(run, pending, start=old + recent)
    KafkaEventOutbox.objects.filter(delivered_at__isnull=True).update(
        created_at=timezone.now() - timedelta(days=60)  # old, but never delivered
    )


def test_only_delivered_records_past_retention_are_pruned_in_batches(
    outbox_topic: str, kafka_broker: KafkaBroker
) -> None:
    delivered_and_pending(old=7, recent=2, pending=3)
    first = prune_delivered_outbox(batch_size=3, max_batches=2)
    assert (first.deleted, first.batches, first.more) == (6, 2, True)
    rest = prune_delivered_outbox(batch_size=3, max_batches=2)
    assert (rest.deleted, rest.batches, rest.more) == (1, 1, False)
    assert KafkaEventOutbox.objects.filter(delivered_at__isnull=False).count() == 2
    assert KafkaEventOutbox.objects.filter(delivered_at__isnull=True).count() == 3
    assert prune() == {"deleted": 0, "batches": 1, "more": False}  # the beat task


def test_prune_outbox_counts_on_a_dry_run_and_deletes_without_input(
    outbox_topic: str, kafka_broker: KafkaBroker
) -> None:
    delivered_and_pending(old=4, recent=1, pending=1)
    out = io.StringIO()
    call_command("prune_outbox", "--dry-run", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"prunable": 4, "deleted": 0, "retention_days": 7}
    assert KafkaEventOutbox.objects.count() == 6
    with pytest.raises(CommandError, match="--no-input"):
        call_command("prune_outbox")  # asks first, and nobody can answer here
    assert KafkaEventOutbox.objects.count() == 6

    out = io.StringIO()
    call_command("prune_outbox", "--no-input", "--batch-size", "3", "--json", stdout=out)
    summary = json.loads(out.getvalue())
    assert (summary["prunable"], summary["deleted"], summary["batches"]) == (4, 4, 2)
    assert KafkaEventOutbox.objects.count() == 2

    out = io.StringIO()
    call_command("prune_outbox", "--retention-days", "0", "--no-input", stdout=out)
    assert "deleted 1" in out.getvalue()
    assert KafkaEventOutbox.objects.filter(delivered_at__isnull=True).count() == 1
    with pytest.raises(CommandError):
        call_command("prune_outbox", "--batch-size", "0")
