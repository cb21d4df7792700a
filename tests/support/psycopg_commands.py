"""What psycopg sends on its own: the BEGIN, COMMIT and ROLLBACK it issues outside any
statement Django logs (`BaseConnection._exec_command`), for the tests that pin a hot path's
round trips (a folded BEGIN, a COMMIT sent in a statement's string)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch

from psycopg._connection_base import BaseConnection


@contextmanager
def psycopg_commands() -> Iterator[list[bytes]]:
    """The commands psycopg sent by itself while the block ran, in order."""
    sent: list[bytes] = []
    real = BaseConnection._exec_command

    def exec_command(self: BaseConnection, command: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(bytes(command))
        return real(self, command, *args, **kwargs)

    with patch.object(BaseConnection, "_exec_command", exec_command):
        yield sent
