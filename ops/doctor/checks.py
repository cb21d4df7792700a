"""The doctor's checks: selectors that find impossible states, one kind each.

Every check is a bounded read (at most `limit` findings) over an index the kind needs:
open intents through the partial open index, leases and live runs through their own
small sets, outbox leases among undelivered records. None of them writes. A state the
running system repairs by itself within its normal cadence (a lapsed run lease for the
reaper, a lapsed outbox lease for the next relay batch) is not reported until it has
outlived that cadence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.fields.json import KT

from agentrun import conf
from dispatch.models import OPEN_INTENT_STATES, RunnerDispatchIntent
from outbox.models import KafkaEventOutbox
from queues.models import AttemptState, QueueAttempt, QueueTask, TaskState
from runs.models import (
    LEASED_RUN_STATUSES,
    TERMINAL_COMMAND_STATES,
    TERMINAL_RUN_STATUSES,
    Lease,
    Run,
)
from sessions.models import Session


@dataclass(frozen=True)
class Finding:
    """One impossible state: its `kind`, the object to repair, and what is wrong."""

    kind: str
    object_id: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def per_row(cls, kind: str, rows: Iterable[Sequence[Any]], detail: str) -> list[Finding]:
        """One finding per row of a check's read: the row's first value is the object,
        the others fill `detail`'s `{}` in order."""
        return [cls(kind, row[0], detail.format(*row[1:])) for row in rows]

    @classmethod
    def first(
        cls, limit: int, kind: str, found: QuerySet[Any], columns: tuple[str, ...], detail: str
    ) -> list[Finding]:
        """The first `limit` rows of a check's query in object order (`columns[0]`, the
        object's id), as findings."""
        rows = found.values_list(*columns).order_by(columns[0])[:limit]
        return cls.per_row(kind, rows, detail)


def sessions_with_ended_turn(limit: int) -> list[Finding]:
    """Sessions whose active run is terminal."""
    status = Run.objects.filter(pk=OuterRef("active_run_id")).values("status")[:1]
    ended = (
        Session.objects.filter(active_run_id__isnull=False)
        .annotate(run_status=Subquery(status))
        .filter(run_status__in=TERMINAL_RUN_STATUSES)
    )
    columns = ("session_id", "active_run_id", "run_status")
    detail = "active run {} is {}"
    return Finding.first(limit, "session-active-run-terminal", ended, columns, detail)


def sessions_with_missing_run(limit: int) -> list[Finding]:
    """Sessions whose active run does not exist."""
    missing = Session.objects.filter(active_run_id__isnull=False).exclude(
        Exists(Run.objects.filter(pk=OuterRef("active_run_id")))
    )
    columns = ("session_id", "active_run_id")
    detail = "active run {} does not exist"
    return Finding.first(limit, "session-active-run-missing", missing, columns, detail)


def claimed_runs_without_lease(limit: int) -> list[Finding]:
    """Claimed or running runs with no `agentrun_leases` row (the claim writes both)."""
    unleased = Run.objects.filter(status__in=LEASED_RUN_STATUSES).exclude(
        Exists(Lease.objects.filter(run=OuterRef("pk")))
    )
    columns = ("id", "status", "claimed_by")
    detail = "{} by {} with no lease row"
    return Finding.first(limit, "run-claimed-without-lease", unleased, columns, detail)


def leases_on_terminal_runs(limit: int) -> list[Finding]:
    """Lease rows of terminal runs (terminalising deletes the lease)."""
    leases = Lease.objects.filter(run__status__in=TERMINAL_RUN_STATUSES)
    columns = ("run_id", "run__status", "runner_id")
    detail = "run is {}; lease held by {}"
    return Finding.first(limit, "lease-on-terminal-run", leases, columns, detail)


def open_intents_of_ended_runs(limit: int) -> list[Finding]:
    """Open dispatch intents whose run or command is terminal (no claim takes them)."""
    stranded = RunnerDispatchIntent.objects.filter(state__in=OPEN_INTENT_STATES).filter(
        Q(run__status__in=TERMINAL_RUN_STATUSES) | Q(command__state__in=TERMINAL_COMMAND_STATES)
    )
    columns = ("id", "state", "run_id", "run__status", "command__state")
    detail = "{} while run {} is {} and its command {}"
    return Finding.first(limit, "intent-open-on-terminal-run", stranded, columns, detail)


def tasks_disagreeing_with_run(limit: int) -> list[Finding]:
    """Running tasks, or running attempts, whose run is terminal or gone: the projector
    never saw the run end. Read from the two small sets (running tasks; active attempts),
    never the whole task history."""
    ended = Q(run_status__isnull=True) | Q(run_status__in=TERMINAL_RUN_STATUSES)
    attempts = (
        QueueAttempt.objects.filter(state=AttemptState.RUNNING, run_id__isnull=False)
        .annotate(run_status=_status_of("run_id"))
        .filter(ended)
        .values_list("task_id", "run_id", "run_status")[:limit]
    )
    tasks = (
        QueueTask.objects.filter(state=TaskState.RUNNING)
        .annotate(run=KT("latest_attempt__run_id"))
        .filter(run__isnull=False)
        .annotate(run_status=_status_of("run"))
        .filter(ended)
        .values_list("id", "run", "run_status")[:limit]
    )
    found = {task_id: (run_id, status) for task_id, run_id, status in [*tasks, *attempts]}
    return [
        Finding(
            "task-disagrees-with-run",
            task_id,
            f"still running while its latest run {run_id} is {status or 'missing'}",
        )
        for task_id, (run_id, status) in sorted(found.items())[:limit]
    ]


def _status_of(run_id_field: str) -> Subquery:
    return Subquery(Run.objects.filter(pk=OuterRef(run_id_field)).values("status")[:1])


def outbox_leases_lapsed(limit: int, *, now: datetime) -> list[Finding]:
    """Undelivered records still leased a whole lease period after their lease ended: the
    worker died and no relay batch has taken them since."""
    grace = timedelta(milliseconds=conf.outbox_lease_ms())
    rows = (
        KafkaEventOutbox.objects.filter(
            delivered_at__isnull=True,
            lease_owner__isnull=False,
            lease_expires_at__lt=now - grace,
        )
        .values_list("id", "lease_owner", "lease_expires_at")
        .order_by("outbox_seq")[:limit]
    )
    return [
        Finding(
            "outbox-lease-lapsed",
            record_id,
            f"leased by {owner} until {until.isoformat() if until else '?'}, never settled",
        )
        for record_id, owner, until in rows
    ]
