"""The lease reaper: runs whose runner stopped heartbeating are failed as infra-failed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from runs.models import Command, Lease, Run
from runs.services.command_lifecycle import create_command
from runs.services.lifecycle import heartbeat_run
from runs.services.reaper import reap_expired_leases
from tests.builders import make_claimed_run
from tests.dispatch.helpers import celery_broker, intent_of, phases


@pytest.fixture(autouse=True)
def memory_broker() -> Iterator[None]:
    """Reaping wakes dispatch on commit: the wake-ups go to an in-memory broker."""
    with celery_broker("memory://localhost/"):
        yield


def _expire(run: Run, *, seconds_ago: float) -> None:
    Run.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=seconds_ago)
    )


@pytest.mark.django_db
def test_a_run_whose_lease_expired_without_heartbeat_is_failed_with_its_open_commands() -> None:
    run = make_claimed_run(runner_id="r1")
    done = create_command(run_id=run.id, type="turn", payload={"text": "a"}).command
    Command.objects.filter(pk=done.pk).update(state="completed")
    open_command = create_command(
        run_id=run.id, type="steer", payload={"text": "b"}, dispatch={}
    ).command
    _expire(run, seconds_ago=10)
    counts = reap_expired_leases(limit=10, grace_ms=5_000)
    assert counts.as_dict() == {"candidates": 1, "reaped": 1, "skipped": 0}
    run.refresh_from_db()
    assert (run.status, run.failure_kind, run.claimed_by) == ("failed", "infra-failed", None)
    assert "r1 stopped heartbeating" in (run.failure_message or "")
    assert not Lease.objects.filter(run=run).exists()
    states = dict(Command.objects.filter(run=run).values_list("id", "state"))
    assert states == {done.id: "completed", open_command.id: "failed"}
    assert intent_of(open_command).state == "cancelled"  # no runner launched for a dead run
    assert phases(run)[-3:] == ["lease-expired", "command-terminal", "terminal_status"]


@pytest.mark.django_db
def test_live_leases_and_leases_within_the_grace_period_are_left_alone() -> None:
    live = make_claimed_run(runner_id="r1")
    recent = make_claimed_run(runner_id="r2")
    _expire(recent, seconds_ago=1)
    assert reap_expired_leases(limit=10, grace_ms=5_000).candidates == 0
    heartbeat_run(run_id=live.id, runner_id="r1", lease_epoch=1, lease_ms=60_000)
    assert set(Run.objects.values_list("status", flat=True)) == {"claimed"}


@pytest.mark.django_db
def test_reap_leases_command_has_a_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    run = make_claimed_run(runner_id="r1")
    _expire(run, seconds_ago=60)
    call_command("reap_leases", "--dry-run", "--json")
    assert run.id in capsys.readouterr().out
    assert Run.objects.get(pk=run.pk).status == "claimed"
    call_command("reap_leases")
    assert Run.objects.get(pk=run.pk).status == "failed"
