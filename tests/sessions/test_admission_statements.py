"""Statements per admission path, pinned (bench cell 9 measures the same paths).

An admission collects the events of every run it writes and appends them once at its end
(one read of the last seqs, one INSERT, one session touch, one NOTIFY), locks the session
row once and passes it down, and writes a cancel request once, in its final stage. Before
that, an interrupt was 69 statements, a created turn 33 and a steer 21 (one seq read,
INSERT, session UPDATE and NOTIFY per event, the session re-read up to five times, every
cancel stage saved on its own). Counts include BEGIN and COMMIT; the outbox is off. A
path that ends a run has one UPDATE more since issue 16: it revokes the run's runner keys.
Since issue 18 the append is one statement (`runs.sql.insert_events`: the seq read, the
INSERT and the session touch were three) plus the NOTIFY after COMMIT, and a session
version is one statement (the shared feed lock and `nextval` were two).
Issue 21's webhook-delivery INSERT … SELECT is made only when the event statement found
an endpoint that could match; these tenants have none, so it is not counted.
Since issue 18 item 4 admission collects its session projection (`sessions.session_writes`)
as it collects events: the session row is written once, with at most one new version, where
an interrupt wrote it three times with two versions; that write draws its version in the
same statement (`sessions.sql`: the shared feed lock, `nextval` and the UPDATE were two
statements); and a run's end reads its queue task and its session's queued turns in one
query (`queues.selectors.task_and_queued_turns_of`). Created 18 → 16, created on an ended
session 15 → 13, interrupt 30 → 25, stale turn replaced 27 → 22, steer 13 → 12, session
cancel 22 → 20; a turn queued behind a busy one is 13 (it writes no session row).
Since issue 18's third round a run's end is one statement (`runs.sql.end_run`: the run's
terminal status and a cancel's mark, the cancel request, the closed commands, the intents
fenced, the lease deleted, the runner keys revoked were up to nine), and an interrupt
locks the active run's commands once, with the run: interrupt 25 → 17, stale turn
replaced 22 → 19, session cancel 20 → 13. And a new turn's run, command and dispatch
intent are inserted in one statement at the end of the admission (`agentrun.row_inserts`;
a new run's first command needs no `MAX(seq)` read): created 16 → 13, created on an ended
session 13 → 10, interrupt 17 → 14, stale turn replaced 19 → 16. That statement also
reads the run's queue task and its session's queued turns (the run's end asked them in a
query of their own): interrupt 14 → 13, stale turn replaced 16 → 15, session cancel
13 → 12.
Since issue 18's fifth round the new turn's rows go in the statement of the session
UPDATE that points at them (`sessions.sql.update_session_columns(lead=…)`), and that
statement also checks the run's backend profile exists (an ORM `exists()` before):
created 13 → 11, created on an ended session 10 → 8, interrupt 13 → 11, stale turn
replaced 15 → 13, steer through admission 12 → 11. A session cancel locks the run's
commands once, with the run (it locked the active one, the session, then all of them
again): 12 → 11.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentrun.errors import AgentRunError
from agentrun.tenancy import Scope
from runs.models import Run
from sessions.services.steering import admit_steer, cancel_session
from tests.sessions.helpers import admit
from tests.sessions.world import claim, phases

pytestmark = pytest.mark.django_db(transaction=True)


def statements(operation: Callable[[], Any]) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        operation()
    return [query["sql"] for query in captured.captured_queries]


def count(sqls: list[str], start: str) -> int:
    return sum(sql.startswith(start) for sql in sqls)


def session_locks(sqls: list[str]) -> int:
    return sum(
        sql.startswith("SELECT") and 'FROM "agentrun_sessions"' in sql and "FOR UPDATE" in sql
        for sql in sqls
    )


def writes_session_once(sqls: list[str]) -> bool:
    """One UPDATE of the session row (the events' statement aside), one version drawn."""
    updates = sum('UPDATE "agentrun_sessions" SET' in sql for sql in sqls)
    drawn = sum("nextval('agentrun_session_version_seq'" in sql for sql in sqls)
    return (updates, drawn) == (1, 1)


def appends_once(sqls: list[str]) -> bool:
    """The events were appended in one go: one statement (`runs.sql`) that reads the last
    seqs, inserts, touches the session and notifies, and no other event INSERT or NOTIFY."""
    inserts = sum("INSERT INTO agentrun_events" in sql for sql in sqls)
    notifies = sum("pg_notify" in sql for sql in sqls)
    return (inserts, notifies) == (1, 1) and count(sqls, "WITH base") == 1


def test_a_created_turn_on_a_new_session() -> None:
    sqls = statements(lambda: admit("s-new", "hi", dispatch={}))
    assert len(sqls) == 11, sqls
    assert appends_once(sqls)
    # The version the INSERT drew is the only one: nobody saw the row before this commit.
    assert writes_session_once(sqls)
    assert phases(Run.objects.get().id) == ["user_message", "run-created", "command-created"]


def test_a_created_turn_on_a_session_whose_last_turn_ended_locks_its_row_once() -> None:
    admit("s-ended", "first", dispatch={})
    cancel_session(
        session_id="s-ended", scope=Scope.tenant("tenant-a"), reason="stop", requested_by=None
    )
    sqls = statements(lambda: admit("s-ended", "second", dispatch={}))
    assert len(sqls) == 8, sqls
    assert session_locks(sqls) == 1 and appends_once(sqls) and writes_session_once(sqls)


@pytest.mark.parametrize("claimed", [False, True])
def test_an_interrupt_appends_both_runs_events_at_once(claimed: bool) -> None:
    """Claimed or not (two more stage events when a runner holds the lease), the same
    statements: the events of both runs go in one append."""
    first = admit("s-int", "first", dispatch={})
    assert first.run is not None
    if claimed:
        claim(first.run.id)
    sqls = statements(lambda: admit("s-int", "second", dispatch={}, when_busy="interrupt"))
    assert len(sqls) == 11, sqls
    assert session_locks(sqls) == 1 and appends_once(sqls) and writes_session_once(sqls)
    # the request, inserted once (in the statement that ends the run), never updated
    assert sum('INSERT INTO "agentrun_cancel_requests"' in sql for sql in sqls) == 1
    assert sum('UPDATE "agentrun_cancel_requests"' in sql for sql in sqls) == 0
    stages = ["cancel-delivered", "cancel-aborting"] if claimed else []
    assert phases(first.run.id)[3:] == [
        *(["run-claimed"] if claimed else []),
        "cancel-accepted",
        "cancel-persisted",
        *stages,
        "command-terminal",
        "terminal_status",
        "cancel-terminalized",
    ]


def test_a_stale_turn_replaced_by_a_new_one() -> None:
    first = admit("s-stale", "first", dispatch={})
    assert first.run is not None
    claim(first.run.id)
    Run.objects.filter(pk=first.run.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=5)
    )
    sqls = statements(lambda: admit("s-stale", "second", dispatch={}))
    assert len(sqls) == 13, sqls
    assert session_locks(sqls) == 1 and appends_once(sqls) and writes_session_once(sqls)


@pytest.mark.parametrize("through", ["admit_turn", "admit_steer"])
def test_a_steer(through: str) -> None:
    admit("s-steer", "first", dispatch={})
    if through == "admit_turn":
        sqls = statements(lambda: admit("s-steer", "more", when_busy="steer"))
    else:
        sqls = statements(
            lambda: admit_steer(
                session_id="s-steer", scope=Scope.tenant("tenant-a"), payload={"text": "x"}
            )
        )
    # through admission, the steer command goes in the session UPDATE's statement
    assert len(sqls) == (11 if through == "admit_turn" else 12), sqls
    assert session_locks(sqls) == 1 and appends_once(sqls) and writes_session_once(sqls)


def test_a_turn_queued_behind_the_active_one_writes_no_session_row() -> None:
    admit("s-queue", "first", dispatch={})
    sqls = statements(lambda: admit("s-queue", "later", dispatch={}, when_busy="enqueue"))
    assert len(sqls) == 13, sqls
    assert session_locks(sqls) == 1 and not any('UPDATE "agentrun_sessions"' in q for q in sqls)


def test_a_busy_session_refuses_without_writing() -> None:
    admit("s-busy", "first", dispatch={})

    def refused() -> None:
        with pytest.raises(AgentRunError, match="busy"):
            admit("s-busy", "again")

    sqls = statements(refused)
    assert len(sqls) == 7, sqls
    assert count(sqls, "INSERT") == 0 and count(sqls, "UPDATE") == 0


def test_a_session_cancel() -> None:
    first = admit("s-cancel", "first", dispatch={})
    assert first.run is not None
    claim(first.run.id)
    sqls = statements(
        lambda: cancel_session(
            session_id="s-cancel", scope=Scope.tenant("tenant-a"), reason="stop", requested_by=None
        )
    )
    assert len(sqls) == 11, sqls
    assert session_locks(sqls) == 1 and appends_once(sqls)
