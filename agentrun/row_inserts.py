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

A service may also ask the statement to check a precondition (`require`: run creation's
"the backend profile exists", an ORM read and a round trip of its own before): the check
is a column of the statement's result, and a false one raises the service's error once
the rows are written; the caller's transaction (or savepoint) then rolls them back, as
every caller of a collecting block already must for any error. And the block's owner may
hand the statement to the session row's UPDATE that follows it (`take`): one round trip
where there were two (`sessions.sql.update_session_columns`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Model

from agentrun.deferred_writes import collecting_into
from agentrun.raw_sql import RowWrite, mark_inserted, write_ctes


@dataclass(frozen=True)
class Check:
    """A precondition the insert statement evaluates: `expression` (a boolean SQL
    expression, the caller's own text, never input) with its `params`; `refusal` is the
    error to raise when it is false."""

    expression: str
    params: list[Any]
    refusal: Callable[[], Exception]


@dataclass
class InsertStatement:
    """The collected rows as the CTEs of one statement (`ctes`, `params`), and the checks
    to select after them (`checks_sql`, `checks_params`: one boolean column each)."""

    ctes: str
    params: list[Any]
    rows: list[Model]
    checks: list[Check] = field(default_factory=list)

    @property
    def with_clause(self) -> str:
        return f"WITH {self.ctes}\n" if self.ctes else ""

    @property
    def checks_sql(self) -> str:
        return ", ".join(f"({check.expression})" for check in self.checks) or "TRUE"

    @property
    def checks_params(self) -> list[Any]:
        return [param for check in self.checks for param in check.params]

    def written(self, results: Sequence[Any]) -> None:
        """The statement ran and its check columns read `results`: the rows exist now;
        raise the first failed check's refusal."""
        mark_inserted(self.rows)
        for check, ok in zip(self.checks, results, strict=False):
            if not ok:
                raise check.refusal()


class PendingInserts:
    """The new rows of one block, in creation order, and the checks to make with them."""

    def __init__(self) -> None:
        self._rows: list[Model] = []
        self._checks: list[Check] = []

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

    def require(self, check: Check) -> None:
        """Evaluate `check` in the insert statement (see the module)."""
        self._checks.append(check)

    def take(self) -> InsertStatement | None:
        """The collected rows and checks as one statement, for the caller to run (then
        `InsertStatement.written`); the block then writes nothing. None when empty."""
        rows, self._rows = self._rows, []
        checks, self._checks = self._checks, []
        if not rows and not checks:
            return None
        ctes, params = write_ctes([RowWrite(row) for row in rows]) if rows else ("", [])
        return InsertStatement(ctes, params, rows, checks)

    def write(self) -> None:
        statement = self.take()
        if statement is not None:
            write_inserts(statement)


def write_inserts(statement: InsertStatement) -> None:
    """Run `statement` on its own: its inserts, then its checks."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"{statement.with_clause}SELECT {statement.checks_sql}",
            statement.params + statement.checks_params,
        )
        results = cursor.fetchone()
    statement.written(results)


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
