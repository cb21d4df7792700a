"""The `default` database of `agentrun.settings`, built from its settings.

Kept out of the settings module because it is logic, not a list of values: which engine
(the placeholder when DATABASE_URL is unset), whether this process pools, and the
server-side limits every connection carries.
"""

from __future__ import annotations

import os
from typing import Any

import dj_database_url


def default_database(
    *,
    url: str,
    pool_size: int,
    pool_timeout_s: float,
    statement_timeout_ms: int,
    idle_in_transaction_timeout_ms: int,
) -> dict[str, Any]:
    # Health checks: a connection is tested before it is lent (unpooled: one empty round
    # trip; pooled: agentrun/pooled_db), so one that the server closed while it sat idle (a
    # restart, pg_terminate_backend) is replaced instead of failing the request that drew it.
    database: dict[str, Any] = dict(
        dj_database_url.parse(url or "postgres:///", conn_max_age=0, conn_health_checks=True)
    )
    options = database.setdefault("OPTIONS", {})
    # How this process's connections show in pg_stat_activity (the listener names its own):
    # the setting, else libpq's PGAPPNAME (which `up` gives each child), else "agentrun".
    options["application_name"] = (
        os.environ.get("AGENTRUN_DB_APPLICATION_NAME") or os.environ.get("PGAPPNAME") or "agentrun"
    )
    if not url:
        # Importing settings starts nothing: the first connection fails with a clear message.
        database["ENGINE"] = "agentrun.unconfigured_db"
    elif pool_size > 0 and os.environ.get("AGENTRUN_DB_POOL_ENABLED") == "1":
        # Only the ASGI server pools (agentrun/asgi.py sets the flag): its requests give their
        # connection back at their end. Celery threads, commands and tests have no request
        # end, so a pooled connection would stay lent for the thread's life and starve it.
        options["pool"] = {
            "min_size": min(2, pool_size),
            "max_size": pool_size,
            "timeout": pool_timeout_s,
            # A connection idle this long is closed (down to min_size): a burst's connections
            # do not stay open for ever on a shared server.
            "max_idle": 60,
        }
        # The lent connection is tested by its socket, not by a round trip per request
        # (agentrun/pooled_db says why); psycopg_pool's own test is the round trip.
        database["ENGINE"] = "agentrun.pooled_db"
        database["CONN_HEALTH_CHECKS"] = False
    options["options"] = (
        f"-c statement_timeout={statement_timeout_ms} "
        f"-c idle_in_transaction_session_timeout={idle_in_transaction_timeout_ms}"
    )
    return database
