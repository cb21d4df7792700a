"""Session versions: a change feed that never skips a change.

Every visible change of a session takes the next value of one global sequence. A reader
walking `version > cursor` must never see version 11 committed while version 10 is still
in flight (it would move its cursor past 10 and miss it). So:

- a writer takes `SESSION_VERSION` in *shared* mode before `nextval`, and holds it to
  commit. Writers never wait for each other;
- a feed read takes it in *exclusive* mode first: that waits for every writer that holds
  an allocated but uncommitted version, then reads. Any version allocated later is larger
  than everything the read saw.

Deadlock-freedom rests on one rule: a writer allocates the version *after* it has taken
every row lock it needs (the run, its commands, then the session row), so a writer holding
the shared lock never waits for a lock another writer holds.
"""

from __future__ import annotations

from django.db import connection

from agentrun.locks import LockKey, advisory_xact_lock, advisory_xact_lock_shared

_FEED = "global"


def next_session_version() -> int:
    """Allocate the next session version. Inside the writer's transaction, after its row
    locks; the shared feed lock is held until that transaction ends."""
    advisory_xact_lock_shared(LockKey.SESSION_VERSION, _FEED)
    with connection.cursor() as cursor:
        cursor.execute("SELECT nextval('agentrun_session_version_seq')")
        return int(cursor.fetchone()[0])


def settle_feed() -> None:
    """Wait until no allocated version is uncommitted. Call first in the feed's
    transaction; the reads that follow see a gap-free prefix of versions."""
    advisory_xact_lock(LockKey.SESSION_VERSION, _FEED)
