"""The admin screen shared by the relays' tables: rows leased, sent and settled by a worker.

Outbox records (→ Kafka) and webhook deliveries (→ HTTP) have the same lease and outcome
columns and the same state (`state_at(now)`: pending, leased, retrying, delivered), belong
to a run, grow with traffic, and have one operator action that makes a row due now. So
their screens share one base: read-only, never counting the table, a run link, the
operator actions' permission, and the `state` column.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.utils import timezone

from agentrun.admin_actions import OperatorActionsMixin
from agentrun.admin_console import BigTableAdmin, RunLinkColumn


class LeasedRowAdmin(RunLinkColumn, OperatorActionsMixin, BigTableAdmin):
    """A relay table's screen (see module doc); subclasses name the columns and action."""

    @admin.display(description="state")
    def state(self, row: Any) -> str:
        return str(row.state_at(timezone.now()).label)
