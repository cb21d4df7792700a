"""Claims on the real database with real threads: exactly-once dispatch, lease expiry,
stale claims, and a cancel racing a launch."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.utils import timezone

from agentrun.models import ApiKey
from dispatch.models import RunnerDispatchIntent
from dispatch.services.claims import StaleClaimError, claim_intents, complete_intent
from dispatch.services.failures import retry_intent, terminalize_intent
from dispatch.services.launch import dispatch_batch
from runs.models import Backend, RunnerJob
from runs.services.cancellation import cancel_run
from tests.dispatch.helpers import (
    RecordingLauncher,
    intent_of,
    make_dispatch_command,
    phases,
    set_capacity,
)
from tests.runs.threads import race

INTENTS = 1000
CLAIMERS = 4


def _claimer(owner: str, launcher: RecordingLauncher) -> Callable[[], Counter[str]]:
    def work() -> Counter[str]:
        totals: Counter[str] = Counter()
        while True:
            counts = dispatch_batch(owner=owner, limit=25, launchers={"local": launcher})
            totals.update(counts.as_dict())
            if counts.claimed == 0:
                return totals

    return work


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limited", [True, False], ids=["fenced", "unlimited"])
def test_four_claimers_racing_over_1000_intents_dispatch_each_exactly_once(limited: bool) -> None:
    if limited:
        set_capacity("scripted", 100_000)
    else:  # no limit: no fence, the four batches settle concurrently
        Backend.objects.filter(profile="scripted").update(capacity={})
    for _ in range(INTENTS):
        make_dispatch_command()
    launcher = RecordingLauncher()
    started = time.perf_counter()
    results = race([_claimer(f"worker-{i}", launcher) for i in range(CLAIMERS)])
    elapsed = time.perf_counter() - started
    assert not [r for r in results if isinstance(r, Exception)], results
    assert sum(r["claimed"] for r in results) == INTENTS
    assert sum(r["dispatched"] for r in results) == INTENTS
    assert len(launcher.launches) == INTENTS
    assert set(launcher.launches.values()) == {1}  # none twice
    intents = RunnerDispatchIntent.objects
    assert intents.filter(state="dispatched", attempt_count=1).count() == INTENTS
    assert RunnerJob.objects.count() == INTENTS
    assert sorted(RunnerJob.objects.values_list("idempotency_key", flat=True)) == sorted(
        intents.values_list("runner_job_id", flat=True)
    )
    shares = [r["dispatched"] for r in results]
    print(
        f"\n{INTENTS} intents, {CLAIMERS} claimers: dispatched in {elapsed:.2f}s "
        f"= {INTENTS / elapsed:.0f} intents/s (claim + launch + complete); shares {shares}"
    )


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_dies_after_claiming_is_reclaimed_after_its_lease_and_dispatched_once() -> (
    None
):
    command = make_dispatch_command()
    (dead,) = claim_intents(owner="dead-worker", lease_ms=300, limit=10)
    launcher = RecordingLauncher()
    assert dispatch_batch(owner="live-worker", launchers={"local": launcher}).claimed == 0
    time.sleep(0.35)
    counts = dispatch_batch(owner="live-worker", launchers={"local": launcher})
    assert (counts.claimed, counts.dispatched) == (1, 1)
    intent = intent_of(command)
    assert (intent.state, intent.attempt_count, intent.lease_owner) == ("dispatched", 2, None)
    assert launcher.launches == {intent.id: 1}
    with pytest.raises(StaleClaimError):  # the dead worker comes back: refused
        complete_intent(claim=dead, launched=_launched_for(dead))
    assert RunnerJob.objects.filter(run=command.run_id).count() == 1
    assert phases(command.run_id).count("runner-dispatched") == 1


@pytest.mark.django_db(transaction=True)
def test_expired_claims_raced_by_four_claimers_are_each_dispatched_once() -> None:
    """The claim's rescue (dispatch 0006): the expired claims of a dead worker are given
    back and claimed in the claimer's transaction, each by one claimer, whatever races."""
    Backend.objects.filter(profile="scripted").update(capacity={})
    commands = [make_dispatch_command() for _ in range(60)]
    dead = claim_intents(owner="dead-worker", lease_ms=60_000, limit=100)
    assert len(dead) == 60
    RunnerDispatchIntent.objects.update(lease_expires_at=timezone.now())
    launcher = RecordingLauncher()
    shares = race([_claimer(f"worker-{n}", launcher) for n in range(CLAIMERS)])
    assert not [share for share in shares if isinstance(share, Exception)], shares
    assert sum(share["dispatched"] for share in shares) == 60, shares
    assert sorted(launcher.launches.values()) == [1] * 60
    states = set(RunnerDispatchIntent.objects.values_list("state", "attempt_count"))
    assert states == {("dispatched", 2)}
    for command in commands:
        assert phases(command.run_id).count("runner-dispatched") == 1
    with pytest.raises(StaleClaimError):  # the dead worker comes back: refused
        complete_intent(claim=dead[0], launched=_launched_for(dead[0]))


@pytest.mark.django_db(transaction=True)
def test_a_claim_rescues_at_most_its_batch_and_leaves_live_leases() -> None:
    """Expired claims beyond the batch are left to the next claim's rescue; a claim whose
    lease is live is not touched."""
    for _ in range(16):
        make_dispatch_command()
    (live,) = claim_intents(owner="live-worker", lease_ms=60_000, limit=1)
    claim_intents(owner="dead-worker", lease_ms=60_000, limit=100)
    RunnerDispatchIntent.objects.exclude(pk=live.id).update(lease_expires_at=timezone.now())
    first = claim_intents(owner="worker-a", lease_ms=60_000, limit=10)
    assert len(first) == 10 and {claim.attempt_count for claim in first} == {2}
    waiting = RunnerDispatchIntent.objects.filter(lease_owner="dead-worker")
    assert waiting.count() == 5
    assert set(waiting.values_list("state", "attempt_count")) == {("dispatching", 1)}
    second = claim_intents(owner="worker-b", lease_ms=60_000, limit=10)
    assert len(second) == 5 and {claim.attempt_count for claim in second} == {2}
    kept = RunnerDispatchIntent.objects.get(pk=live.id)
    assert (kept.state, kept.lease_owner, kept.attempt_count) == ("dispatching", "live-worker", 1)


@pytest.mark.django_db(transaction=True)
def test_a_completion_with_a_stale_claim_is_refused_and_changes_nothing() -> None:
    command = make_dispatch_command()
    (first,) = claim_intents(owner="worker-a", lease_ms=1, limit=1)
    time.sleep(0.01)
    (second,) = claim_intents(owner="worker-b", lease_ms=60_000, limit=1)
    assert (first.id, first.attempt_count, second.attempt_count) == (second.id, 1, 2)
    for settle in (
        lambda: complete_intent(claim=first, launched=_launched_for(first)),
        lambda: retry_intent(claim=first, error={"message": "x"}, delay_ms=10),
        lambda: terminalize_intent(claim=first, error={"message": "x"}),
    ):
        with pytest.raises(StaleClaimError) as refused:
            settle()
        assert (refused.value.code, refused.value.http_status) == ("stale_claim", 409)
        assert "worker-b" in refused.value.message
    intent = intent_of(command)
    assert (intent.state, intent.lease_owner, intent.attempt_count) == (
        "dispatching",
        "worker-b",
        2,
    )
    assert not RunnerJob.objects.exists()
    done = complete_intent(claim=second, launched=_launched_for(second))
    assert done.state == "dispatched" and done.actual_runner_job_id is not None


@pytest.mark.django_db(transaction=True)
def test_a_run_cancelled_between_claim_and_completion_cancels_the_intent() -> None:
    command = make_dispatch_command()
    (claim,) = claim_intents(owner="worker-a", lease_ms=60_000, limit=1)
    cancel_run(run_id=command.run_id, reason="user changed their mind")
    with pytest.raises(StaleClaimError) as refused:
        complete_intent(claim=claim, launched=_launched_for(claim))
    assert refused.value.details["state"] == "cancelled"
    intent = intent_of(command)
    assert (intent.state, intent.active_runner_id, intent.dispatched_at) == (
        "cancelled",
        None,
        None,
    )
    assert not RunnerJob.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_landing_during_the_launch_aborts_it_and_records_no_runner_job() -> None:
    command = make_dispatch_command()
    launcher = RecordingLauncher(
        on_launch=lambda request: cancel_run(run_id=request.run_id, reason="cancelled mid-launch")
    )
    counts = dispatch_batch(owner="worker-a", launchers={"local": launcher})
    assert (counts.claimed, counts.dispatched, counts.fenced) == (1, 0, 1)
    intent = intent_of(command)
    assert (intent.state, intent.active_runner_id) == ("cancelled", None)
    assert not RunnerJob.objects.exists()
    assert launcher.aborted == [f"test-{intent.runner_job_id}"]
    key = ApiKey.objects.get(role="runner", run_id=command.run_id)
    assert key.revoked_at is not None  # the aborted runner's key no longer works
    assert "runner-dispatched" not in phases(command.run_id)


@pytest.mark.django_db(transaction=True)
def test_intents_of_terminal_runs_are_never_claimed() -> None:
    live = make_dispatch_command()
    gone = make_dispatch_command()
    cancel_run(run_id=gone.run_id, reason="stop")
    claims = claim_intents(owner="w", lease_ms=60_000, limit=10)
    assert [claim.command_id for claim in claims] == [live.id]
    assert intent_of(gone).state == "cancelled"


def _launched_for(claim: object) -> object:
    from dispatch.launchers import Launched

    return Launched(
        launcher="local",
        job_name="test-job",
        namespace="test",
        image="",
        manager_url="http://test",
        runner_id="runner-test",
        source_commit="test",
    )
