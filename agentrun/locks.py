"""Advisory locks, spelled once.

Every advisory lock key is the seed's shape, `(hashtext(namespace), hashtext(value))`, so an
old and a new manager sharing a database take the same locks (issue 17 item 11; tested in
tests/test_locks.py against the seed's own `pg_advisory_xact_lock(hashtext($1),
hashtext($2))`). The namespace is a `LockKey` below — one list, easy to find in `pg_locks`
and in the logs, with the seed's names — except for the outbox key lock, whose namespace is
the Kafka topic itself, as in the seed (`outbox.locks.insert_outbox_records`).

- `advisory_xact_lock` is transaction-scoped: it is released by the commit or rollback
  of the service transaction that took it, so it must be called inside `atomic()`.
- `advisory_session_lock` (the same two-part key) outlives transactions. Use it only
  where a lock must be held across a commit, such as the runner-create fence held while
  counting active runs and launching; enter it *outside* `atomic()` so that commit
  precedes unlock. Session and transaction advisory locks share
  one key space, so it excludes the seed's transaction-scoped fence on the same key.

Row locks (`SELECT … FOR UPDATE`) live in each app's `locks.py`.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

logger = logging.getLogger("agentrun.locks")


class LockKey(enum.StrEnum):
    CREATE_RUN = "agentrun-create-run"
    SESSION_TURN_ADMISSION = "agentrun-session-turn-admission"
    RUNNER_CREATE = "agentrun-runner-create"
    # Shared by writers allocating a session version, exclusive for a change-feed read.
    SESSION_VERSION = "agentrun-session-version"
    # The same protocol for the work queue's task versions (queues.versions).
    QUEUE_VERSION = "agentrun-queue-version"
    # Per queue name: held while the scheduler counts a limited queue's running tasks and
    # starts one, so two workers never both take its last slot.
    QUEUE_SLOTS = "agentrun-queue-slots"
    # Held by `manage.py migrate` (ops): two processes migrating one database at once (two
    # pods starting) take turns, so an original database is adopted once.
    MIGRATE = "agentrun-migrate"


def advisory_xact_lock(key: LockKey, value: str) -> None:
    """Block until the transaction holds `(key, value)`; released at commit or rollback."""
    advisory_xact_lock_on(str(key), value)


def advisory_xact_lock_on(namespace: str, value: str) -> None:
    """`advisory_xact_lock` for a namespace that is data, not a `LockKey`: the seed's outbox
    key lock is `(hashtext(topic), hashtext(partition key))`."""
    assert connection.in_atomic_block, "advisory_xact_lock needs an open transaction"
    with connection.cursor() as cursor:
        # Raw SQL: the ORM has no advisory locks. hashtext() keeps the seed's key shape.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [namespace, value]
        )


def advisory_xact_lock_shared(key: LockKey, value: str) -> None:
    """The shared mode of `advisory_xact_lock`: many holders at once, none while an
    exclusive holder has it. Released at commit or rollback."""
    assert connection.in_atomic_block, "advisory_xact_lock_shared needs an open transaction"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock_shared(hashtext(%s), hashtext(%s))", [str(key), value]
        )


# The shared lock first, then the value: `locked` is read by a one-time filter, so the
# sequence is not drawn before the lock is held (`agentrun.versions` needs that order). A
# statement that starts with `SHARED_LOCK_CTE` (its two parameters first) and filters on
# `EXISTS (SELECT FROM locked)` reads no row, so draws no value, before the lock is held.
SHARED_LOCK_CTE = """\
WITH locked AS MATERIALIZED (
  SELECT pg_advisory_xact_lock_shared(hashtext(%s), hashtext(%s))
)
"""
_NEXTVAL_UNDER_SHARED_LOCK = (  # two constants, no input
    SHARED_LOCK_CTE + "SELECT nextval(%s::regclass) WHERE EXISTS (SELECT FROM locked)\n"  # noqa: S608
)


def nextval_under_shared_lock(key: LockKey, value: str, sequence: str) -> int:
    """`advisory_xact_lock_shared(key, value)`, then the sequence's next value, in one
    statement (one round trip where it was two: a version feed's writer, issue 18)."""
    assert connection.in_atomic_block, "nextval_under_shared_lock needs an open transaction"
    with connection.cursor() as cursor:
        cursor.execute(_NEXTVAL_UNDER_SHARED_LOCK, [str(key), value, sequence])
        row = cursor.fetchone()
    return int(row[0])


@contextmanager
def advisory_session_lock(key: LockKey, value: str, *, wait: bool = True) -> Iterator[bool]:
    """Hold a session-level lock across transactions; yields False if `wait=False` missed it.

    Must be entered outside `atomic()`: the protected transaction commits inside the block,
    before the lock is released.
    """
    assert not connection.in_atomic_block, "enter advisory_session_lock outside atomic()"
    take = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
    with connection.cursor() as cursor:
        # Raw SQL, as above: django-pglocks would hash its own one-bigint key, not the seed's.
        cursor.execute(f"SELECT {take}(hashtext(%s), hashtext(%s))", [str(key), value])
        acquired = wait or bool(cursor.fetchone()[0])
    try:
        yield acquired
    finally:
        if acquired:
            _unlock_session_lock(key, value)


def _unlock_session_lock(key: LockKey, value: str) -> None:
    """Best effort: a failed unlock must not replace the error in flight, and PostgreSQL
    drops a session lock with its connection anyway."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))", [str(key), value]
            )
    except Exception:
        logger.warning("could not release advisory lock %s:%s", key, value, exc_info=True)
