"""Database connections of Celery workers: kept from one task to the next, checked between.

Celery's Django fixup closes every database connection of a task's thread before and after
each task (`DjangoWorkerFixup.close_database`, Celery 5.7: unconditionally, whatever
`CONN_MAX_AGE` says; `CELERY_DB_REUSE_MAX` only closes every n-th time, with no check in
between). So each dispatch batch through Celery opened a fresh connection: TCP, startup,
authentication and Django's session set-up, several round trips and a server process
before the batch's first statement (bench cell 3, issue 18).

`install` replaces that close, in worker processes only, with `release_task_connections`,
run at the same two points (before and after every task). It keeps a thread's connection
unless one of these says it is not what a fresh one would be:

- a transaction is open, Django's (`atomic`, autocommit off) or the server's (a raw
  `BEGIN`, or a failed one): nothing a task began may carry over into the next task;
- a database error was raised through it during the task: cheaper to drop than to prove
  what it left behind (a session advisory lock whose unlock failed, for one);
- the server has ended it, or sent something unasked (its socket is readable and an empty
  statement fails: `agentrun.pooled_db`'s test, no round trip for a quiet socket): a
  restart or `pg_terminate_backend` is then replaced before a task uses it, not after the
  task fails on it;
- it is older than `MAX_AGE_S`, so a server's per-session memory and a worker's
  connections to a replaced server host do not live for ever.

The fixup's other duties stay as they are: a prefork child still drops the connections it
inherited (`on_worker_process_init` uses the fixup's own close), caches are still closed.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from psycopg import pq

from agentrun.pooled_db.base import connection_alive

# Why ten minutes: long enough that a busy worker opens a connection per thread a few
# times an hour, short enough that a failover's old host is let go soon after.
MAX_AGE_S = 600.0
_OPENED_AT = "_agentrun_worker_opened_at"


def install(app: Any) -> None:
    """Replace the Django fixup's per-task close of `app`'s worker (call at `worker_init`,
    after the fixup installed its own handlers)."""
    from celery.fixups.django import DjangoFixup

    for fixup in app._fixups or []:
        if isinstance(fixup, DjangoFixup):
            # The fixup's task_prerun / task_postrun handlers call this attribute.
            fixup.worker_fixup.close_database = release_task_connections
    connection_created.connect(_stamp, dispatch_uid=_OPENED_AT)


def release_task_connections(**_: Any) -> None:
    """Close this thread's connections that may not serve the next task; keep the rest."""
    for wrapper in connections.all(initialized_only=True):
        if wrapper.connection is None:
            continue
        if reusable(wrapper):
            # Just checked: no round trip before its next use (Django 4.1+; not in the stubs).
            wrapper.health_check_done = True  # type: ignore[attr-defined]
        else:
            wrapper.close()


def reusable(wrapper: BaseDatabaseWrapper) -> bool:
    """Whether an open connection is as good for the next task as a fresh one."""
    raw = wrapper.connection
    if wrapper.in_atomic_block or not wrapper.autocommit or wrapper.errors_occurred:
        return False
    if raw.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    opened = getattr(wrapper, _OPENED_AT, None)
    if opened is None or time.monotonic() - opened >= MAX_AGE_S:
        return False
    return connection_alive(raw)


def _stamp(sender: Any, connection: BaseDatabaseWrapper, **_: Any) -> None:
    setattr(connection, _OPENED_AT, time.monotonic())
