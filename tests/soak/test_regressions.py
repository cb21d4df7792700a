"""Regression tests for what the soak test found (tests/soak/README.md).

1. A deadlock between two runs of one session: an event append took the outbox key lock,
   then waited for the session row, which a writer of the session's other run held while
   it waited for the key to append its own event. The append now takes the session row
   first (run, session, outbox key: the documented order).
2. A claim (or a steer sent straight to a run) of an older run of a session, whose turn was
   over while a newer turn was active, took the session over: the session pointed at one
   run and at another run's turn command, and admission refused every later turn with 409
   `session_projection_invalid` or 404.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, transaction
from pytest_django.fixtures import Settings as SettingsWrapper

from runs.locks import lock_run
from runs.models import Event, Run
from runs.services.command_lifecycle import create_command, finish_command
from runs.services.event_log import NewEvent, append_event_locked, append_runner_events
from runs.services.lifecycle import claim_run, finish_run
from runs.services.terminal import TurnResult
from sessions.locks import lock_session
from sessions.models import Session
from sessions.services.admission import admit_turn
from sessions.turns import TurnRequest
from tests.builders import run_spec

TENANT = "tenant-a"


def _admit(session_id: str, text: str) -> Any:
    return admit_turn(
        request=TurnRequest(
            session_id=session_id,
            tenant_id=TENANT,
            spec=run_spec(session_ref={"session_id": session_id}),
            payload={"text": text},
            dispatch=None,
        )
    )


def _blocked_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row and row[0] == "Lock")


@pytest.mark.django_db(transaction=True)
def test_appends_to_two_runs_of_one_session_do_not_deadlock(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9"  # records are written, not sent
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    first = _admit("sess-deadlock", "one").run
    finish_command(
        command_id=first.commands.get().id,
        runner_id="r1",
        lease_epoch=claim_run(run_id=first.id, runner_id="r1", lease_ms=60_000).lease_epoch,
        result=TurnResult("completed"),
    )
    second = _admit("sess-deadlock", "two").run
    runner = claim_run(run_id=first.id, runner_id="r1", lease_ms=60_000)
    outcome: list[Any] = []
    pid: list[int] = []

    def append_to_first() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            events = [NewEvent("log", {"line": 1})]
            outcome.append(
                append_runner_events(
                    run_id=first.id, runner_id="r1", lease_epoch=runner.lease_epoch, events=events
                )
            )
        except Exception as error:  # the deadlock, before the fix
            outcome.append(error)
        finally:
            connection.close()

    with transaction.atomic():  # a writer of the session's other run
        locked = lock_run(second.id)
        lock_session("sess-deadlock")
        thread = threading.Thread(target=append_to_first)
        thread.start()
        deadline = time.monotonic() + 10
        while not (pid and _blocked_on_a_lock(pid[0])):
            assert time.monotonic() < deadline, "the append never waited"
            time.sleep(0.01)
        append_event_locked(run=locked, type="backend_status", payload={"phase": "probe"})
    thread.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], list), outcome


@pytest.mark.django_db
def test_a_late_claim_of_an_older_run_leaves_the_newer_turn_in_place() -> None:
    old = _admit("sess-late-claim", "one")
    run = claim_run(run_id=old.run.id, runner_id="r1", lease_ms=60_000)
    finish_command(
        command_id=old.command.id,
        runner_id="r1",
        lease_epoch=run.lease_epoch,
        result=TurnResult("completed"),
    )
    new = _admit("sess-late-claim", "two")
    assert new.disposition == "created"
    claim_run(run_id=old.run.id, runner_id="r1", lease_ms=60_000)  # the old runner again
    create_command(run_id=old.run.id, type="steer", payload={"text": "late"})
    session = Session.objects.get(pk="sess-late-claim")
    assert (session.active_run_id, session.active_command_id) == (new.run.id, new.command.id)
    with pytest.raises(Exception) as busy:
        _admit("sess-late-claim", "three")
    assert getattr(busy.value, "code", None) == "session_busy"


@pytest.mark.django_db
def test_finishing_a_run_closes_the_commands_it_never_ran() -> None:
    turn = _admit("sess-late-steer", "one")
    run = claim_run(run_id=turn.run.id, runner_id="r1", lease_ms=60_000)
    finish_command(
        command_id=turn.command.id,
        runner_id="r1",
        lease_epoch=run.lease_epoch,
        result=TurnResult("completed"),
    )
    late = create_command(run_id=run.id, type="steer", payload={"text": "too late"}).command
    finish_run(run_id=run.id, runner_id="r1", lease_epoch=run.lease_epoch,
               result=TurnResult("completed"))  # fmt: skip
    late.refresh_from_db()
    assert late.state == "cancelled"
    closing = Event.objects.get(run=run, payload__phase="command-terminal",
                                payload__command_id=late.id)  # fmt: skip
    assert closing.payload["reason"] == "run-finished"
    assert Run.objects.get(pk=run.pk).status == "completed"
