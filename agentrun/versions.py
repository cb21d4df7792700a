"""Version feeds: global change counters that a reader can walk without skipping a change.

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

from django.db import connection

from agentrun.locks import LockKey, advisory_xact_lock, advisory_xact_lock_shared

_FEED = "global"


@dataclass(frozen=True)
class VersionFeed:
    lock: LockKey
    sequence: str

    def next_version(self) -> int:
        """Allocate the next version. Inside the writer's transaction, after its row
        locks; the shared feed lock is held until that transaction ends."""
        advisory_xact_lock_shared(self.lock, _FEED)
        with connection.cursor() as cursor:
            # Raw SQL: the ORM has no sequences. The name is a constant of this module.
            cursor.execute("SELECT nextval(%s)", [self.sequence])
            row = cursor.fetchone()
        return int(row[0])

    def settle(self) -> None:
        """Wait until no allocated version is uncommitted. Call first in the feed's
        transaction; the reads that follow see a gap-free prefix of versions."""
        advisory_xact_lock(self.lock, _FEED)


SESSION_VERSIONS = VersionFeed(LockKey.SESSION_VERSION, "agentrun_session_version_seq")
QUEUE_VERSIONS = VersionFeed(LockKey.QUEUE_VERSION, "agentrun_queue_version_seq")
