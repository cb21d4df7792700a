"""Run services that write several events append them in one go, pinned by statement count.

Cancel (run or command), finish (run or command) and the lease reaper collect their events
and append them once at the end: one read of the last seq, one INSERT, one NOTIFY (and one
session UPDATE when the run has a session), whatever the number of events; a cancel
request is written once, in its final stage. The events themselves, their order and
seqs are the tests in test_cancel.py and test_lease_protocol.py. Counts include BEGIN and
COMMIT; the outbox is off. With one append per event these were 41 (the run cancel), 30
(the command cancel), 37 (the run finish), 24 (the command finish) and 28 (the reaper).
Ending a run costs one UPDATE more since issue 16: it revokes the run's runner keys.
Since issue 18 the append is one statement (`runs.sql.insert_events`: seq read, INSERT,
session UPDATE) and the NOTIFY, sent after COMMIT; a session version is one statement.
Issue 21's webhook-delivery INSERT … SELECT is made only when the event statement found
an endpoint that could match; these tenants have none, so it is not counted.
Since issue 18 item 4 the end of a session's run reads its queue task and the session's
queued turns in one query (`queues.selectors.task_and_queued_turns_of`), and a session
write draws its version in its own UPDATE (`sessions.sql`): run finish 21 → 18 (two
versioned session writes), command finish 16 → 14, reaper 17 → 15.
Since issue 18's third round a run's end is one statement (`runs.sql.end_run`): the run's
terminal status (and a cancel's mark: one UPDATE, not two), the cancel request, the closed
commands, the fenced intents, the lease and the runner keys; for a session's run it also
reads the run's queue task and the session's queued turns (their own query before). Run
cancel 16 → 7, run finish 18 → 14, reaper 15 → 11.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import Event, Run
from runs.services.cancellation import cancel_command, cancel_run
from runs.services.command_lifecycle import ack_command, create_command, finish_command
from runs.services.lifecycle import claim_run, finish_run
from runs.services.reaper import reap_expired_leases
from runs.services.terminal import TurnResult
from tests.builders import make_claimed_run, make_run

pytestmark = pytest.mark.django_db(transaction=True)


def statements(operation: Callable[[], Any]) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        operation()
    return [query["sql"] for query in captured.captured_queries]


def appended_once(sqls: list[str]) -> bool:
    """One event statement (`runs.sql`: seq read, INSERT, session touch and NOTIFY in one),
    and no other event INSERT or NOTIFY."""
    inserts = sum("INSERT INTO agentrun_events" in sql for sql in sqls)
    notifies = sum("pg_notify" in sql for sql in sqls)
    return (inserts, notifies) == (1, 1) and any(sql.startswith("WITH base") for sql in sqls)


def claimed_session_run() -> Run:
    run = make_run(session_ref={"session_id": "s-1", "metadata": {}})
    return claim_run(run_id=run.id, runner_id="runner-1", lease_ms=60_000)


def events_of(run: Run) -> list[int]:
    return list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))


def test_a_run_cancel_with_a_live_runner_and_two_open_commands() -> None:
    run = make_claimed_run()
    for text in ("first", "second"):
        create_command(run_id=run.id, type="turn", payload={"text": text})
    before = len(events_of(run))
    sqls = statements(lambda: cancel_run(run_id=run.id, reason="stop"))
    # the run and its commands locked, one statement for the request, the run, both
    # commands, the intents, the lease and the keys, and one append of eight events
    assert len(sqls) == 7, sqls
    assert appended_once(sqls)
    assert sum(sql.startswith('UPDATE "agentrun_cancel_requests"') for sql in sqls) == 0
    assert events_of(run) == list(range(1, before + 9))


def test_a_command_cancel() -> None:
    run = make_claimed_run()
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    sqls = statements(lambda: cancel_command(command_id=command.id, reason="stop"))
    assert len(sqls) == 10, sqls
    assert appended_once(sqls)


def test_a_run_finish_that_records_the_thread_and_closes_an_open_command() -> None:
    run = claimed_session_run()
    for text in ("first", "second"):
        create_command(run_id=run.id, type="turn", payload={"text": text})
    result = TurnResult("completed", thread_id="thread-1")
    sqls = statements(
        lambda: finish_run(
            run_id=run.id, runner_id="runner-1", lease_epoch=run.lease_epoch, result=result
        )
    )
    assert len(sqls) == 14, sqls
    assert appended_once(sqls)


def test_a_command_finish_that_records_the_thread() -> None:
    run = claimed_session_run()
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    ack_command(command_id=command.id, runner_id="runner-1", lease_epoch=run.lease_epoch)
    result = TurnResult("completed", thread_id="thread-1")
    sqls = statements(
        lambda: finish_command(
            command_id=command.id, runner_id="runner-1", lease_epoch=run.lease_epoch, result=result
        )
    )
    assert len(sqls) == 14, sqls
    assert appended_once(sqls)


def test_the_reaper_fails_a_run_in_one_append() -> None:
    run = claimed_session_run()
    create_command(run_id=run.id, type="turn", payload={"text": "hi"})
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(minutes=5))
    sqls = statements(lambda: reap_expired_leases(limit=10, grace_ms=0))
    assert len(sqls) == 11, sqls
    assert appended_once(sqls)
