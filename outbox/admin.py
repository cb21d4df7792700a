"""Admin for the outbox: an operator's read-only view of the Kafka outbox records.

The relay services own every column, so nothing is editable here (the operator issue adds
a requeue action that calls a service). The table is large: the changelist never runs a
full `COUNT(*)` — its paginator counts at most `CappedCountPaginator.cap` rows.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import cached_property

from outbox.models import KafkaEventOutbox, OutboxState
from runs.admin import ReadOnlyAdmin


class CappedCountPaginator(Paginator):
    """Counts with `LIMIT cap` (a bounded scan); past the cap, the last page is approximate."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        return int(self.object_list[: self.cap].count())


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


@admin.register(KafkaEventOutbox)
class KafkaEventOutboxAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "outbox_seq",
        "topic",
        "partition_key",
        "run_id",
        "source_seq",
        "state",
        "attempt_count",
        "next_attempt_at",
        "delivered_at",
    ]
    list_filter = [OutboxStateFilter, "topic"]
    search_fields = ["=id", "=event_id", "=run__id", "=partition_key"]
    raw_id_fields = ["run"]
    ordering = ["-outbox_seq"]
    show_full_result_count = False
    paginator = CappedCountPaginator

    @admin.display(description="state")
    def state(self, record: KafkaEventOutbox) -> str:
        return str(record.state_at(timezone.now()).label)
