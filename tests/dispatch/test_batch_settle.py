"""The batch path of dispatch: the fence only where a profile has a limit, set-based
completion whose statement count does not grow with the batch, and a batch in which some
claims went stale."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentrun.locks import LockKey, advisory_session_lock
from agentrun.models import ApiKey
from dispatch.launchers import Launched
from dispatch.models import RunnerDispatchIntent
from dispatch.services.claims import Completion, IntentClaim, claim_intents, complete_intents
from dispatch.services.launch import dispatch_batch
from runs.models import Backend, Event, RunnerJob
from runs.services.cancellation import cancel_run
from sessions.models import Session
from tests.dispatch.helpers import RecordingLauncher, make_dispatch_command, set_capacity


class FenceHolder:
    """Holds the runner-create fence of a profile from another thread and connection."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.held = threading.Event()
        self.release = threading.Event()
        self.released = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        try:
            with advisory_session_lock(LockKey.RUNNER_CREATE, self.profile):
                self.held.set()
                self.release.wait(30)
            self.released.set()
        finally:
            connection.close()

    def __enter__(self) -> FenceHolder:
        self.thread.start()
        assert self.held.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join(10)


@pytest.mark.django_db(transaction=True)
def test_an_unlimited_profile_dispatches_while_another_worker_holds_its_fence() -> None:
    Backend.objects.filter(profile="scripted").update(capacity={})
    command = make_dispatch_command()
    with FenceHolder("scripted") as holder:
        counts = dispatch_batch(launchers={"local": RecordingLauncher()})
        assert not holder.released.is_set(), "the dispatch waited for the fence"
    assert (counts.claimed, counts.dispatched) == (1, 1)
    assert RunnerDispatchIntent.objects.get(command=command).state == "dispatched"


@pytest.mark.django_db(transaction=True)
def test_a_limited_profile_waits_for_its_fence() -> None:
    set_capacity("scripted", 5)
    make_dispatch_command()
    done = threading.Event()

    def dispatch() -> None:
        try:
            dispatch_batch(launchers={"local": RecordingLauncher()})
            done.set()
        finally:
            connection.close()

    with FenceHolder("scripted"):
        worker = threading.Thread(target=dispatch, daemon=True)
        worker.start()
        assert not done.wait(0.5), "dispatched past a fence held by another worker"
    worker.join(10)
    assert done.is_set()
    assert RunnerDispatchIntent.objects.get().state == "dispatched"


LAST_CAPTURE: list[dict[str, str]] = []


def _statements_of_one_batch(size: int, *, in_sessions: bool) -> int:
    RunnerDispatchIntent.objects.all().delete()
    for i in range(size):
        session = {"session_id": f"ses-batch-{size}-{i}"} if in_sessions else None
        make_dispatch_command(session_ref=session)
    with CaptureQueriesContext(connection) as queries:
        counts = dispatch_batch(limit=size, launchers={"local": RecordingLauncher()})
    assert counts.dispatched == size
    LAST_CAPTURE[:] = queries.captured_queries
    return len(queries.captured_queries)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("in_sessions", "capacity", "most"),
    # BEGIN/COMMIT included: the claim with the keys' INSERT (4), the completion (8: the
    # run and command locks, the jobs and intents in one statement (`dispatch.sql`, which
    # is the intents' lock too, since issue 18), the events' append); a session touch
    # adds one UPDATE; a limited profile adds the fence (lock, unlock) and its four
    # capacity reads (the limit, active runs per tenant, the batch's holders, the
    # contending tenants); the events' append makes one webhook-delivery INSERT (issue
    # 21). It was about 15 per intent before the batch path, 18 per batch before issue
    # 18, 14 before the intents' lock was the write's.
    [(False, {}, 13), (True, {}, 14), (False, {"max_concurrent_runs": 1000}, 19)],
)
def test_a_batch_costs_the_same_statements_whatever_its_size(
    in_sessions: bool, capacity: dict[str, int], most: int
) -> None:
    Backend.objects.filter(profile="scripted").update(capacity=capacity)
    small = _statements_of_one_batch(2, in_sessions=in_sessions)
    large = _statements_of_one_batch(25, in_sessions=in_sessions)
    assert small == large, (small, large)
    assert large <= most, "\n".join(q["sql"][:120] for q in LAST_CAPTURE)
    if in_sessions:
        touched = Session.objects.filter(session_id__startswith="ses-batch-25-")
        assert touched.count() == 25
        assert all(session.last_event_seq > 0 for session in touched)


@pytest.mark.django_db(transaction=True)
def test_each_launch_gets_its_own_run_scoped_key() -> None:
    commands = [make_dispatch_command() for _ in range(4)]
    launcher = RecordingLauncher()
    dispatch_batch(launchers={"local": launcher})
    keys = ApiKey.objects.filter(role="runner")
    assert sorted(keys.values_list("run_id", flat=True)) == sorted(c.run_id for c in commands)
    assert keys.values("key_digest").distinct().count() == 4
    assert not keys.filter(revoked_at__isnull=False).exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_with_a_run_cancelled_meanwhile_completes_the_others() -> None:
    commands = [make_dispatch_command() for _ in range(3)]
    claims = claim_intents(owner="worker-a", lease_ms=60_000, limit=10)
    assert len(claims) == 3
    cancelled = commands[1].run_id
    cancel_run(run_id=cancelled, reason="changed my mind")
    outcome = complete_intents(
        completions=[Completion(claim, _launched(claim)) for claim in claims]
    )
    assert sorted(intent.run_id for intent in outcome.completed) == sorted(
        c.run_id for c in commands if c.run_id != cancelled
    )
    assert [item.claim.run_id for item, _ in outcome.refused] == [cancelled]
    assert RunnerJob.objects.filter(run_id=cancelled).count() == 0
    assert RunnerJob.objects.count() == 2
    assert RunnerDispatchIntent.objects.get(run_id=cancelled).state == "cancelled"
    for command in commands:  # every run's log stays gap-free
        seqs = list(Event.objects.filter(run_id=command.run_id).values_list("seq", flat=True))
        assert sorted(seqs) == list(range(1, len(seqs) + 1))
    dispatched = Event.objects.filter(payload__phase="runner-dispatched")
    assert sorted(dispatched.values_list("run_id", flat=True)) == sorted(
        c.run_id for c in commands if c.run_id != cancelled
    )


@pytest.mark.django_db(transaction=True)
def test_a_batch_with_a_claim_taken_over_meanwhile_completes_the_others() -> None:
    """The intents' fence is the write's compare-and-set: a claim whose lease expired and
    whose intent another worker claimed again is refused, and only it; its intent, job and
    log stay the new owner's to write."""
    commands = [make_dispatch_command() for _ in range(3)]
    claims = claim_intents(owner="worker-a", lease_ms=60_000, limit=10)
    taken = commands[1].run_id
    RunnerDispatchIntent.objects.filter(run_id=taken).update(lease_expires_at=timezone.now())
    (new,) = claim_intents(owner="worker-b", lease_ms=60_000, limit=10)
    assert (new.run_id, new.attempt_count) == (taken, 2)
    outcome = complete_intents(
        completions=[Completion(claim, _launched(claim)) for claim in claims]
    )
    assert sorted(intent.run_id for intent in outcome.completed) == sorted(
        c.run_id for c in commands if c.run_id != taken
    )
    assert all(intent.state == "dispatched" for intent in outcome.completed)
    ((refused, error),) = outcome.refused
    assert refused.claim.run_id == taken
    assert (error.code, error.details["state"]) == ("stale_claim", "dispatching")
    assert "worker-b" in error.message
    intent = RunnerDispatchIntent.objects.get(run_id=taken)
    assert (intent.state, intent.lease_owner, intent.attempt_count) == (
        "dispatching",
        "worker-b",
        2,
    )
    assert RunnerJob.objects.filter(run_id=taken).count() == 0
    assert not Event.objects.filter(run_id=taken, payload__phase="runner-dispatched").exists()
    assert RunnerJob.objects.count() == 2


def _launched(claim: IntentClaim) -> Launched:
    return Launched(
        launcher="local",
        job_name=f"job-{claim.runner_job_id}",
        namespace="test",
        image="",
        manager_url="http://test",
        runner_id=claim.runner_id,
        source_commit="test",
    )
