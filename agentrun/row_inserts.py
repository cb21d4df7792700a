"""New rows collected per block and inserted together, in one statement, at its end.

A created turn inserts a run, its `turn` command and the command's dispatch intent, each
an ORM `create()` (a round trip and ~1.5 ms of CPU: bench cell 9, issue 18), from three
services of two apps (`runs.services.lifecycle`, `runs.services.command_lifecycle`,
`dispatch.intents`). Inside `collecting_inserts()` those services hand their new instance
to `insert_row`, which keeps it; when the block completes, the rows go in one
data-modifying CTE (`agentrun.raw_sql.write_ctes`), in the order they were created, so
a command's run is inserted with it (foreign keys are checked at the end of the
statement). Outside a collecting block `insert_row` inserts at once, as `create()` did.

Nobody else sees a new row before the commit, so deferring it changes nothing for other
transactions; within the block, a reader of the new rows must ask the collector first
(`is_pending`: a command of a run still pending is its run's first, no `MAX(seq)` read).
The block must end before any statement that needs the rows (the session row that points
at the new run, the events of the new run). Like `PendingEvents`, an exception out of the
block drops what it collected: the caller's transaction must then roll back.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar

from django.db import connection
from django.db.models import Model

from agentrun.deferred_writes import collecting_into
from agentrun.raw_sql import RowWrite, mark_inserted, write_ctes


class PendingInserts:
    """The new rows of one block, in creation order."""

    def __init__(self) -> None:
        self._rows: list[Model] = []

    def add(self, row: Model) -> None:
        self._rows.append(row)

    def is_pending(self, row: Model) -> bool:
        """`row` was created in this block and is not inserted yet."""
        return any(pending is row for pending in self._rows)

    def pending_of(self, model: type[Model], **values: object) -> list[Model]:
        """The pending rows of `model` whose attributes have these values."""
        return [
            row
            for row in self._rows
            if type(row) is model and all(getattr(row, k) == v for k, v in values.items())
        ]

    def write(self) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        ctes, params = write_ctes([RowWrite(row) for row in rows])
        with connection.cursor() as cursor:
            cursor.execute(f"WITH {ctes}\nSELECT 1", params)
        mark_inserted(rows)


_COLLECTING: ContextVar[PendingInserts | None] = ContextVar(
    "agentrun_pending_inserts", default=None
)


def pending_inserts() -> PendingInserts | None:
    """The collector of the block the caller runs in, or None outside one."""
    return _COLLECTING.get()


def insert_row(row: Model) -> None:
    """Insert a new instance: now, or at the end of the caller's collecting block."""
    pending = _COLLECTING.get()
    if pending is None:
        row.save(force_insert=True)
    else:
        pending.add(row)


def collecting_inserts() -> AbstractContextManager[PendingInserts]:
    """Defer `insert_row` to the end of the block (see the module). Needs the caller's
    transaction; a block inside another one joins the outer one."""
    return collecting_into(_COLLECTING, PendingInserts, PendingInserts.write)
