"""Staged cancellation: receipts, stage events, fencing, late writes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.control_models import CancelRequest
from runs.models import Command, Event, Lease, Run
from runs.services.cancellation import cancel_command, cancel_run
from runs.services.command_lifecycle import ack_command, create_command, finish_command
from runs.services.lifecycle import finish_run
from runs.services.terminal import TurnResult
from tests.builders import make_claimed_run, make_run


def stage_phases(run: Run) -> list[str]:
    return [
        e.payload["phase"] if e.type == "backend_status" else e.type
        for e in Event.objects.filter(run=run).order_by("seq")
        if e.type == "terminal_status" or e.payload.get("phase", "").startswith("cancel-")
    ]


@pytest.mark.django_db
def test_cancel_with_a_live_lease_records_every_stage_in_order() -> None:
    run = make_claimed_run(runner_id="r1")
    outcome = cancel_run(run_id=run.id, reason="user pressed stop")
    assert outcome.changed and outcome.cancel_request is not None
    assert outcome.cancel_request.stage == "terminalized" and outcome.cancel_request.epoch == 1
    assert stage_phases(run) == [
        "cancel-accepted",
        "cancel-persisted",
        "cancel-delivered",
        "cancel-aborting",
        "terminal_status",
        "cancel-terminalized",
    ]
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.failure_kind, stored.claimed_by) == (
        "cancelled",
        "cancelled",
        None,
    )
    assert stored.cancel_request_id == outcome.cancel_request.id
    assert not Lease.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_cancel_with_an_expired_lease_is_fenced() -> None:
    run = make_claimed_run(runner_id="r1", lease_ms=1000)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    cancel_run(run_id=run.id, reason="stop")
    assert stage_phases(run) == [
        "cancel-accepted",
        "cancel-persisted",
        "cancel-fenced",
        "terminal_status",
        "cancel-terminalized",
    ]
    fenced = Event.objects.get(run=run, payload__phase="cancel-fenced")
    assert fenced.payload["claimed_by"] == "r1"


@pytest.mark.django_db
def test_cancel_cancels_open_commands_and_a_second_cancel_changes_nothing() -> None:
    run = make_run()
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    first = cancel_run(run_id=run.id, reason="stop")
    assert Command.objects.get(pk=command.pk).state == "cancelled"
    events_after_first = Event.objects.filter(run=run).count()
    second = cancel_run(run_id=run.id, reason="stop again")
    assert not second.changed
    assert second.cancel_request is not None and second.cancel_request.id == first.cancel_request.id
    assert Event.objects.filter(run=run).count() == events_after_first
    assert CancelRequest.objects.filter(run=run).count() == 1


@pytest.mark.django_db
def test_a_runner_finishing_after_cancel_leaves_the_run_cancelled_and_is_recorded() -> None:
    run = make_claimed_run(runner_id="r1")
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    ack_command(command_id=command.id, runner_id="r1", lease_epoch=1)
    cancel_run(run_id=run.id, reason="stop")
    finish_command(
        command_id=command.id,
        runner_id="r1",
        lease_epoch=1,
        result=TurnResult(terminal_status="completed", turn_id="turn-1"),
    )
    finished = finish_run(
        run_id=run.id, runner_id="r1", lease_epoch=1, result=TurnResult(terminal_status="completed")
    )
    assert finished.status == "cancelled"
    assert Command.objects.get(pk=command.pk).state == "cancelled"
    rejected = list(
        Event.objects.filter(run=run, payload__phase="late-write-rejected").order_by("seq")
    )
    assert [e.payload["source"] for e in rejected] == ["command-status", "run-status"]
    assert rejected[1].payload["refused"]["terminal_status"] == "completed"


@pytest.mark.django_db
def test_cancel_command_leaves_the_run_live_and_gets_its_own_epoch() -> None:
    run = make_claimed_run(runner_id="r1")
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    outcome = cancel_command(command_id=command.id, reason="never mind")
    assert outcome.cancel_request.target_kind == "command"
    assert outcome.cancel_request.epoch == 1
    assert Command.objects.get(pk=command.pk).state == "cancelled"
    assert Run.objects.get(pk=run.pk).status == "claimed"
    again = cancel_command(command_id=command.id, reason="again")
    assert not again.changed
