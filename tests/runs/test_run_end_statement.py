"""A run's end is one statement (`runs.sql.end_run`): what it writes, row by row.

It replaced up to nine ORM statements (tests/runs/test_event_batching.py pins the counts);
these pin that the rows end as they did: a cancel's request, mark and closed commands, the
intents fenced with the reason of the write that closed them, the lease row gone.
"""

from __future__ import annotations

import pytest

from dispatch.models import OPEN_INTENT_STATES, IntentState, RunnerDispatchIntent
from queues.models import TaskState
from runs import sql
from runs.control_models import CancelRequest
from runs.models import Command, Lease, Run
from runs.services.cancellation import cancel_run
from runs.services.command_lifecycle import create_command
from runs.services.lifecycle import finish_run
from runs.services.terminal import TurnResult
from tests.builders import make_claimed_run

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_statement_spells_the_states_as_dispatch_and_queues_do() -> None:
    assert tuple(OPEN_INTENT_STATES) == sql.OPEN_INTENT_STATES
    assert sql.INTENT_CANCELLED == IntentState.CANCELLED
    assert sql.TASK_PENDING == TaskState.PENDING


def test_a_run_cancel_writes_its_request_mark_commands_and_intents() -> None:
    run = make_claimed_run()
    for text in ("first", "second"):
        create_command(run_id=run.id, type="turn", payload={"text": text}, dispatch={})
    outcome = cancel_run(run_id=run.id, reason="stop")
    cancel = CancelRequest.objects.get()
    assert outcome.cancel_request is not None and outcome.cancel_request.id == cancel.id
    ended = Run.objects.get(pk=run.id)
    assert (ended.status, ended.failure_message, ended.claimed_by) == ("cancelled", "stop", None)
    assert (ended.cancel_request_id, ended.cancel_epoch, ended.cancel_reason) == (
        cancel.id,
        1,
        "stop",
    )
    for command in Command.objects.filter(run=run):
        assert (command.state, command.cancel_request_id, command.cancel_epoch) == (
            "cancelled",
            cancel.id,
            1,
        )
    intents = RunnerDispatchIntent.objects.filter(run=run)
    assert intents.count() == 2
    assert {(i.state, i.lease_owner) for i in intents} == {("cancelled", None)}
    assert [i.last_error for i in intents] == [{"reason": "stop", "fenced": True}] * 2
    assert not Lease.objects.filter(run=run).exists()


def test_a_run_finish_fences_the_intents_with_the_runs_reason() -> None:
    run = make_claimed_run()
    create_command(run_id=run.id, type="turn", payload={"text": "hi"}, dispatch={})
    finish_run(
        run_id=run.id,
        runner_id="runner-1",
        lease_epoch=run.lease_epoch,
        result=TurnResult(terminal_status="completed"),
    )
    intent = RunnerDispatchIntent.objects.get(run=run)
    assert intent.state == "cancelled"
    assert intent.last_error == {"reason": "run terminalized as completed", "fenced": True}
    assert not Lease.objects.filter(run=run).exists()
