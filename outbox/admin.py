"""Admin for the outbox: an operator's read-only view of the Kafka outbox records.

The relay services own every column, so nothing is editable here. The "release for
immediate retry" action calls `outbox.services.release.release_outbox_record` (the record
and the undelivered records of its key before it become due now; a live lease is left to
its worker). The table is large: the changelist never runs a full `COUNT(*)`
(`EstimatedCountPaginator`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import SafeString

from agentrun.admin_actions import Outcome, service_action
from agentrun.admin_console import link, links
from agentrun.admin_leased_rows import LeasedRowAdmin
from outbox.models import KafkaEventOutbox, OutboxState
from outbox.services.release import release_outbox_record
from runs.models import Event


class OutboxStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state.value, str(state.label)) for state in OutboxState]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[KafkaEventOutbox]
    ) -> QuerySet[KafkaEventOutbox]:
        now, value = timezone.now(), self.value()
        if value == OutboxState.DELIVERED:
            return queryset.filter(delivered_at__isnull=False)
        if value is None:
            return queryset
        pending = queryset.filter(delivered_at__isnull=True)
        if value == OutboxState.LEASED:
            return pending.filter(lease_expires_at__gt=now)
        waiting = pending.exclude(lease_expires_at__gt=now)
        if value == OutboxState.RETRYING:
            return waiting.filter(attempt_count__gt=0)
        return waiting.filter(attempt_count=0)


def _release(request: HttpRequest, record: KafkaEventOutbox, reason: str) -> Outcome:
    result = release_outbox_record(record_id=record.id)
    if result.released:
        return Outcome(True, f"due now ({result.released} record(s) of its key released)")
    return Outcome(False, result.reason)


RELEASE_NOW = service_action(
    name="release_outbox_records",
    description="Release selected records for immediate retry",
    perform=_release,
)


@admin.register(KafkaEventOutbox)
class KafkaEventOutboxAdmin(LeasedRowAdmin):
    list_display = [
        "id",
        "outbox_seq",
        "topic",
        "partition_key",
        "run_link",
        "source_seq",
        "state",
        "attempt_count",
        "next_attempt_at",
        "delivered_at",
    ]
    list_filter = [OutboxStateFilter, "topic", "created_at"]
    search_fields = ["=id", "=event_id", "=run__id", "=partition_key"]
    # Newest first by id (time-ordered, and the primary key's index): `outbox_seq` has an
    # index of undelivered rows only (migration 0004), so ordering by it sorted the table.
    ordering = ["-id"]
    readonly_fields = ["related"]
    actions = [RELEASE_NOW]

    @admin.display(description="related")
    def related(self, record: KafkaEventOutbox) -> SafeString:
        event_id = Event.objects.filter(pk=record.event_id).values_list("pk", flat=True).first()
        return links(
            link("runs_run", record.run_id, f"run {record.run_id}"),
            link("runs_event", event_id, f"event #{record.source_seq}"),
        )
