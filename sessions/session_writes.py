"""Session projection writes collected per transaction, the way `PendingEvents` collects
events: the session row is written once, with at most one new version, at the end.

A turn admission used to write its session row up to four times (the old turn's end and
the new turn's start, each with a new version, the new run's `last_run_id` in between),
each write a round trip and an ORM `save()`. Inside `collecting_session_writes()` the
projection (`sessions.projection`) applies its changes to the locked instance instead and
marks what changed; when the block completes, each touched row gets one UPDATE of the
union of its changed columns (`sessions.sql`), and one version if any change was visible.
Nobody sees the row between the writes (the transaction holds its lock), so the one write
shows what the four showed at commit.

The version is drawn at that end, after every row lock the transaction takes (as
`agentrun.versions` wants), and not at all for a row this transaction inserted: its
version is already this transaction's own.

Why a context and not an argument: the writes happen deep in the `runs` services
(`create_run_locked`, `terminalize_run_locked`, `create_command_locked`), which already
pass the locked row down as `session=`; the collector tells the projection to defer, with
no new parameter through every layer. Outside a collecting block every projection write
is applied at once, as before. Like `PendingEvents`, an exception out of the block drops
what it collected: the caller's transaction must then roll back.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field

from agentrun.deferred_writes import collecting_into
from agentrun.row_inserts import InsertStatement, write_inserts
from sessions.models import Session
from sessions.sql import update_session_columns


@dataclass
class _PendingRow:
    session: Session
    fields: set[str] = field(default_factory=set)
    bump: bool = False
    versioned: bool = False  # inserted by this transaction, with its own new version


class PendingSessionWrites:
    """The locked session rows of one transaction and what changed on each."""

    def __init__(self) -> None:
        self._rows: dict[str, _PendingRow] = {}
        self._lead: InsertStatement | None = None

    def row(self, session_id: str) -> Session | None:
        """The collected instance of a session, if this transaction touched it already:
        reading it again from the database would miss the changes not yet written."""
        pending = self._rows.get(session_id)
        return pending.session if pending else None

    def add(self, session: Session, fields: Iterable[str], *, bump: bool) -> None:
        pending = self._rows.get(session.session_id)
        if pending is not None and pending.session is not session:
            # Another instance of the same row (read before this one's changes were
            # written): write those first, so neither instance's changes are lost.
            self._write(self._rows.pop(session.session_id))
            pending = None
        if pending is None:
            pending = self._rows[session.session_id] = _PendingRow(session)
        pending.fields.update(fields)
        pending.bump = pending.bump or bump

    def inserted(self, session: Session) -> None:
        """`session` was inserted by this transaction, with a version of its own."""
        self._rows.setdefault(session.session_id, _PendingRow(session)).versioned = True

    def lead_with(self, statement: InsertStatement | None) -> None:
        """Insert `statement`'s rows (`agentrun.row_inserts.PendingInserts.take`) in the
        first session UPDATE of `write`, or on their own if no row has changes: one round
        trip where there were two."""
        self._lead = statement

    def write(self) -> None:
        """Write every touched row once, in session id order (each is locked already)."""
        rows, self._rows = self._rows, {}
        lead, self._lead = self._lead, None
        for session_id in sorted(rows):
            if self._write(rows[session_id], lead=lead):
                lead = None
        if lead is not None:
            write_inserts(lead)

    @staticmethod
    def _write(pending: _PendingRow, *, lead: InsertStatement | None = None) -> bool:
        """Write the row's changes (after `lead`'s inserts); False when it has none."""
        bump = pending.bump and not pending.versioned
        if not (pending.fields or bump):
            return False
        update_session_columns(pending.session, pending.fields, bump=bump, lead=lead)
        return True


_COLLECTING: ContextVar[PendingSessionWrites | None] = ContextVar(
    "agentrun_pending_session_writes", default=None
)


def pending_session_writes() -> PendingSessionWrites | None:
    """The collector of the block the caller runs in, or None outside one."""
    return _COLLECTING.get()


def collecting_session_writes() -> AbstractContextManager[PendingSessionWrites]:
    """Defer the session projection's writes to the end of the block (see the module).
    Needs the caller's transaction; a block inside another one joins the outer one."""
    return collecting_into(_COLLECTING, PendingSessionWrites, PendingSessionWrites.write)
