"""A PostgreSQL backend that refuses to connect: the settings' placeholder for an unset
`DATABASE_URL`.

Importing the settings must start nothing (SPEC §9.1), yet `manage.py --help`, `check`,
`makemigrations` and mypy must work without a database. So with no `DATABASE_URL` the
settings name this backend: it is the PostgreSQL backend in every respect (features,
operations, introspection) except that the first connection attempt, pooled or not,
raises Django's `OperationalError` (what an unreachable database raises, so
`makemigrations` only warns that it cannot check the history) with what to do instead.
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base
from django.db.utils import OperationalError

NOT_CONFIGURED = (
    "DATABASE_URL is not set: `make run` (or `manage.py up`) starts an embedded PostgreSQL, "
    "`python -m agentrun.embedded_db exec -- COMMAND…` runs any command against it; "
    "or point DATABASE_URL at yours (postgres://user@host:5432/dbname)"
)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict[str, Any]:
        # Both the plain and the pooled connection paths ask for their parameters first.
        raise OperationalError(NOT_CONFIGURED)
