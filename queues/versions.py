"""Task versions: a change feed that never skips a change (the `sessions.versions` shape).

Every visible change of a task takes the next value of `agentrun_queue_version_seq`. A
reader walking `version > cursor` must never see version 11 committed while version 10
is still in flight (it would move its cursor past 10 and miss it). So:

- a writer takes `QUEUE_VERSION` in *shared* mode before `nextval`, and holds it to
  commit. Writers never wait for each other;
- a feed read takes it in *exclusive* mode first: that waits for every writer holding an
  allocated but uncommitted version, then reads. Any version allocated later is larger
  than everything the read saw.

Deadlock-freedom rests on one rule: a writer allocates the version *after* it has taken
every row lock it needs (run → task → attempts), so a writer holding the shared lock does
not wait for a row lock another writer holds. (A run terminalisation that projects onto
its task may append one more event afterwards; PostgreSQL reorders a queued exclusive
feed read behind such a writer rather than deadlock, as it does for session versions.)
"""

from __future__ import annotations

from django.db import connection

from agentrun.locks import LockKey, advisory_xact_lock, advisory_xact_lock_shared

_FEED = "global"


def next_queue_version() -> int:
    """Allocate the next task version. Inside the writer's transaction, after its row
    locks; the shared feed lock is held until that transaction ends."""
    advisory_xact_lock_shared(LockKey.QUEUE_VERSION, _FEED)
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('agentrun_queue_version_seq')")
        return int(cursor.fetchone()[0])


def settle_feed() -> None:
    """Wait until no allocated version is uncommitted. Call first in the feed's
    transaction; the reads that follow see a gap-free prefix of versions."""
    advisory_xact_lock(LockKey.QUEUE_VERSION, _FEED)
