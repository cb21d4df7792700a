"""Version feeds: global change counters that a reader can walk without skipping a change.

A reader also marks how far it has read each row (a read-cursor table per feed):
`with_read_version` and `is_unread` answer "changed since I last looked" for both feeds.

Sessions and queue tasks each take the next value of a sequence on every visible change,
so `version > cursor` is a change feed. A reader must never see version 11 committed while
version 10 is still in flight (it would move its cursor past 10 and miss it). So:

- a writer takes the feed's advisory lock in *shared* mode before `nextval`, and holds it
  to commit. Writers never wait for each other;
- a feed read takes it in *exclusive* mode first: that waits for every writer holding an
  allocated but uncommitted version, then reads. Any version allocated later is larger
  than everything the read saw.

Deadlock-freedom rests on one rule: a writer allocates the version *after* it has taken
every row lock it needs (run → commands → session, or run → task → attempts), so a writer
holding the shared lock does not wait for a row lock another writer holds. (A service
appends its events afterwards, at its end: that touches the session row it already holds
and takes the outbox key lock, last in the order; should a writer still wait there,
PostgreSQL reorders a queued exclusive feed read behind it rather than deadlock.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import BigIntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from agentrun.locks import (
    SHARED_LOCK_CTE,
    LockKey,
    advisory_xact_lock,
    nextval_under_shared_lock,
)

_FEED = "global"


@dataclass(frozen=True)
class VersionFeed:
    lock: LockKey
    sequence: str

    def next_version(self) -> int:
        """Allocate the next version. Inside the writer's transaction, after its row
        locks; the shared feed lock is held until that transaction ends."""
        # One statement takes the shared lock and draws the value (the ORM has no
        # sequences; the name is a constant of this module).
        return nextval_under_shared_lock(self.lock, _FEED, self.sequence)

    def drawn_in_statement(self) -> tuple[str, list[str], str]:
        """For a writer that draws its version in the UPDATE that stores it (one round trip
        where `next_version` and the UPDATE were two): the CTE to start the statement with,
        its parameters, and the next-value expression. The statement must filter on
        `EXISTS (SELECT FROM locked)`, so that the value is drawn under the shared lock."""
        return SHARED_LOCK_CTE, [str(self.lock), _FEED], f"nextval('{self.sequence}'::regclass)"

    def settle(self) -> None:
        """Wait until no allocated version is uncommitted. Call first in the feed's
        transaction; the reads that follow see a gap-free prefix of versions."""
        advisory_xact_lock(self.lock, _FEED)


SESSION_VERSIONS = VersionFeed(LockKey.SESSION_VERSION, "agentrun_session_version_seq")
QUEUE_VERSIONS = VersionFeed(LockKey.QUEUE_VERSION, "agentrun_queue_version_seq")


def with_read_version(
    rows: QuerySet[Any], cursors: QuerySet[Any], *, row: str, version: str, reader_id: str | None
) -> QuerySet[Any]:
    """Annotate `read_version`: the version the reader last marked read on each row (0 if
    never; None when no reader is named). `cursors` is the feed's read-cursor table, `row`
    its key to the row and `version` the version it marks."""
    if reader_id is None:
        read_version: Any = Value(None, output_field=BigIntegerField())
    else:
        marked = cursors.filter(**{row: OuterRef("pk")}, reader_id=reader_id)
        read_version = Coalesce(Subquery(marked.values(version)[:1]), Value(0))
    annotated: QuerySet[Any] = rows.annotate(read_version=read_version)
    return annotated


def is_unread(row: Any) -> bool | None:
    """Changed since the reader's mark; None when the row was read with no reader named."""
    read_version = getattr(row, "read_version", None)
    return None if read_version is None else bool(row.version > read_version)
