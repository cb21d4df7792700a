"""The PostgreSQL backend of a process that pools its connections (`agentrun.database_config`).

A connection lent by the pool must work: one that the server closed while it sat in the
pool (a restart, `pg_terminate_backend`, `idle_session_timeout`) is replaced, not handed
to a request that then fails. Django's pool asks psycopg_pool to test every connection it
lends with an empty statement, a round trip per request: on the runner's event append that
was a quarter of a gunicorn worker's time (bench cell 2, issue 18), as much as the append's
own lock and insert. Here the test is the socket's: a server that ends a connection says so
on it (an error message, then end of file), so a pooled connection whose socket has nothing
to read is as alive as a round trip could tell, and only one that has something to read is
given the round trip (which fails for a closed one; the pool then discards it).
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        pool = self.pool
        connection = super().get_new_connection(conn_params)
        if pool is None:
            return connection
        # Each discarded connection leaves the pool; it opens new ones as it needs, so this
        # ends once the pool lends a fresh one (or its own timeout ends the request: 503).
        while not connection_alive(connection):
            pool.putconn(connection)  # closed: the pool sees it broken and discards it
            connection = super().get_new_connection(conn_params)
        return connection


def connection_alive(connection: psycopg.Connection[Any]) -> bool:
    """Whether a connection works: its socket is quiet, or a round trip succeeds. Shared
    by the pool (a connection it lends) and Celery workers (one kept between tasks)."""
    if connection.closed:
        return False
    poller = select.poll()
    poller.register(connection.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    if not poller.poll(0):
        return True  # nothing from the server since the connection was last used
    try:
        connection.execute("")
    except psycopg.Error:
        return False
    return True
