"""Claim, heartbeat and finish: the runner lease protocol and its fences."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentrun.errors import AgentRunError
from runs.models import Event, Lease, Run
from runs.services.command_lifecycle import ack_command, create_command
from runs.services.lifecycle import claim_run, create_run, finish_run, heartbeat_run
from runs.services.terminal import TurnResult
from tests.builders import make_claimed_run, make_run, run_spec
from tests.runs.threads import race


def phases(run: Run) -> list[str]:
    return [
        e.payload.get("phase")
        for e in Event.objects.filter(run=run, type="backend_status").order_by("seq")
    ]


@pytest.mark.django_db
def test_reserved_id_replay_returns_the_same_run_and_a_mismatch_is_409() -> None:
    first = create_run(tenant_id="t", spec=run_spec(), run_id="run_reserved")
    again = create_run(tenant_id="t", spec=run_spec(), run_id="run_reserved")
    assert first.created and not again.created
    assert again.run.id == first.run.id
    with pytest.raises(AgentRunError) as mismatch:
        create_run(tenant_id="t", spec=run_spec(project_id="other"), run_id="run_reserved")
    assert mismatch.value.http_status == 409
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_an_unknown_backend_profile_is_a_400_naming_it() -> None:
    with pytest.raises(AgentRunError) as error:
        make_run(backend_profile="no-such-backend")
    assert error.value.http_status == 400
    assert "backend_profile" in error.value.message


@pytest.mark.django_db
def test_claim_sets_lease_epoch_and_lease_row() -> None:
    run = make_claimed_run(runner_id="r1")
    assert run.status == "claimed" and run.claimed_by == "r1" and run.lease_epoch == 1
    lease = Lease.objects.get(run=run)
    assert lease.runner_id == "r1" and lease.lease_epoch == 1
    assert phases(run) == ["run-claimed"]


@pytest.mark.django_db
def test_an_expired_lease_can_be_taken_over_with_a_new_epoch() -> None:
    run = make_claimed_run(runner_id="r1", lease_ms=1000)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    taken = claim_run(run_id=run.id, runner_id="r2", lease_ms=60_000)
    assert taken.claimed_by == "r2" and taken.lease_epoch == 2
    with pytest.raises(AgentRunError) as stale:
        heartbeat_run(run_id=run.id, runner_id="r1", lease_epoch=1, lease_ms=60_000)
    assert stale.value.code == "stale_lease"
    rejected = Event.objects.filter(run=run, payload__phase="late-write-rejected").get()
    assert rejected.payload["source"] == "heartbeat"
    assert rejected.payload["runner_id"] == "r1"


@pytest.mark.django_db
def test_a_zombie_reusing_its_runner_id_is_fenced_by_the_epoch() -> None:
    run = make_claimed_run(runner_id="r1")
    claim_run(run_id=run.id, runner_id="r1", lease_ms=60_000)  # the restarted runner: epoch 2
    with pytest.raises(AgentRunError) as stale:
        finish_run(
            run_id=run.id,
            runner_id="r1",
            lease_epoch=1,
            result=TurnResult(terminal_status="completed"),
        )
    assert stale.value.code == "stale_lease"
    assert Run.objects.get(pk=run.pk).status == "claimed"


@pytest.mark.django_db
def test_heartbeat_extends_the_lease_and_a_terminal_run_is_returned_as_is() -> None:
    run = make_claimed_run(runner_id="r1", lease_ms=5_000)
    beat = heartbeat_run(run_id=run.id, runner_id="r1", lease_epoch=1, lease_ms=60_000)
    assert beat.lease_expires_at > run.lease_expires_at
    finish_run(
        run_id=run.id, runner_id="r1", lease_epoch=1, result=TurnResult(terminal_status="completed")
    )
    after = heartbeat_run(run_id=run.id, runner_id="r1", lease_epoch=1, lease_ms=60_000)
    assert after.status == "completed" and after.claimed_by is None


@pytest.mark.django_db
def test_ack_moves_a_claimed_run_to_running_and_is_idempotent() -> None:
    run = make_claimed_run(runner_id="r1")
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    acked = ack_command(command_id=command.id, runner_id="r1", lease_epoch=1)
    again = ack_command(command_id=command.id, runner_id="r1", lease_epoch=1)
    assert acked.state == again.state == "acknowledged"
    assert again.acknowledged_at == acked.acknowledged_at
    assert Run.objects.get(pk=run.pk).status == "running"


@pytest.mark.django_db
def test_finish_run_terminalizes_releases_the_claim_and_records_terminal_status() -> None:
    run = make_claimed_run(runner_id="r1")
    done = finish_run(
        run_id=run.id,
        runner_id="r1",
        lease_epoch=1,
        result=TurnResult(
            terminal_status="failed", failure_kind="backend-failed", failure_message="boom"
        ),
    )
    assert (done.status, done.failure_kind, done.claimed_by) == ("failed", "backend-failed", None)
    assert not Lease.objects.filter(run=run).exists()
    terminal = Event.objects.get(run=run, type="terminal_status")
    assert terminal.payload["terminal_status"] == "failed"
    with pytest.raises(AgentRunError) as again:
        claim_run(run_id=run.id, runner_id="r2", lease_ms=60_000)
    assert again.value.http_status == 409


@pytest.mark.django_db(transaction=True)
def test_two_runners_claiming_one_run_exactly_one_wins() -> None:
    for _ in range(5):
        run = make_run()
        results = race(
            [
                lambda r=run: claim_run(run_id=r.id, runner_id="runner-a", lease_ms=60_000),
                lambda r=run: claim_run(run_id=r.id, runner_id="runner-b", lease_ms=60_000),
            ]
        )
        winners = [r for r in results if isinstance(r, Run)]
        losers = [r for r in results if isinstance(r, AgentRunError)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert losers[0].code == "runner-lease-conflict" and losers[0].http_status == 409
        stored = Run.objects.get(pk=run.pk)
        assert stored.claimed_by == winners[0].claimed_by and stored.lease_epoch == 1
        assert phases(stored) == ["run-claimed"]
