"""A runner's heartbeat, pinned: one statement when it holds the live claim
(`runs.locks.extend_live_lease`), the locked path when it does not, and the fence held
under the run's lock against a claim that changes hands while the heartbeat waits.

Before issue 18's last round a heartbeat was six round trips (BEGIN, the run's lock, the
run, lease and runner UPDATEs, COMMIT) whether it held the claim or not.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentrun.errors import AgentRunError
from runs.locks import lock_run
from runs.models import Event, Lease, Run, Runner
from runs.services.lifecycle import finish_run, heartbeat_run
from runs.services.terminal import TurnResult
from tests.builders import make_claimed_run
from tests.support.psycopg_commands import psycopg_commands

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_MS = 60_000


def beat(run: Run, *, runner_id: str = "runner-1", epoch: int = 1) -> tuple[Run, list[str]]:
    """Heartbeat outside any transaction; the run answered and the statements sent (those
    Django logged and any BEGIN or COMMIT psycopg sent by itself)."""
    with psycopg_commands() as sent, CaptureQueriesContext(connection) as captured:
        answer = heartbeat_run(
            run_id=run.id, runner_id=runner_id, lease_epoch=epoch, lease_ms=LEASE_MS
        )
    logged = [query["sql"] for query in captured.captured_queries]
    return answer, logged + [command.decode() for command in sent]


def late_writes(run: Run) -> list[Event]:
    return [
        event
        for event in Event.objects.filter(run=run, type="backend_status").order_by("seq")
        if event.payload.get("phase") == "late-write-rejected"
    ]


def test_a_live_heartbeat_is_one_statement_and_writes_run_lease_and_runner() -> None:
    run = make_claimed_run(runner_id="runner-1", lease_ms=5_000)
    long_ago = timezone.now() - timedelta(hours=1)
    Runner.objects.create(id="runner-1", tenant_id=run.tenant_id, heartbeat_at=long_ago)
    Runner.objects.create(id="runner-other", tenant_id=run.tenant_id, heartbeat_at=long_ago)

    for _ in range(3):  # as sent, then PREPAREd with its EXECUTE, then EXECUTEd
        answer, statements = beat(run)
        assert len(statements) == 1, statements
        assert "agentrun_runs" in statements[0] or "EXECUTE heartbeat_" in statements[0]

    stored = Run.objects.get(pk=run.pk)
    lease = Lease.objects.get(run=run)
    runner = Runner.objects.get(pk="runner-1")
    assert answer.lease_expires_at == stored.lease_expires_at == lease.lease_expires_at
    assert stored.lease_expires_at > timezone.now() + timedelta(seconds=50)
    assert answer.updated_at == stored.updated_at == runner.heartbeat_at
    assert (answer.status, answer.claimed_by, answer.lease_epoch) == ("claimed", "runner-1", 1)
    assert lease.lease_epoch == 1 and lease.runner_id == "runner-1"
    assert Runner.objects.get(pk="runner-other").heartbeat_at == long_ago
    assert late_writes(run) == []


def test_another_tenants_runner_of_the_same_id_is_not_touched() -> None:
    run = make_claimed_run(runner_id="runner-1", tenant_id="tenant-a")
    long_ago = timezone.now() - timedelta(hours=1)
    Runner.objects.create(id="runner-1", tenant_id="tenant-b", heartbeat_at=long_ago)
    beat(run)
    assert Runner.objects.get(pk="runner-1").heartbeat_at == long_ago


@pytest.mark.parametrize(("runner_id", "epoch"), [("runner-1", 2), ("runner-2", 1)])
def test_a_stale_heartbeat_writes_nothing_but_its_refusal(runner_id: str, epoch: int) -> None:
    run = make_claimed_run(runner_id="runner-1", lease_ms=5_000)
    with pytest.raises(AgentRunError) as refused:
        beat(run, runner_id=runner_id, epoch=epoch)
    assert refused.value.code == "stale_lease"
    assert Run.objects.get(pk=run.pk).lease_expires_at == run.lease_expires_at
    assert Lease.objects.get(run=run).lease_expires_at == run.lease_expires_at
    [refusal] = late_writes(run)
    assert refusal.payload["source"] == "heartbeat"
    assert refusal.payload["runner_id"] == runner_id


def test_a_heartbeat_of_an_ended_run_answers_the_run_as_it_ended() -> None:
    run = make_claimed_run(runner_id="runner-1")
    finish_run(
        run_id=run.id,
        runner_id="runner-1",
        lease_epoch=1,
        result=TurnResult(terminal_status="completed"),
    )
    ended = Run.objects.get(pk=run.pk)
    answer, _ = beat(run)
    assert (answer.status, answer.claimed_by) == ("completed", None)
    assert Run.objects.get(pk=run.pk).updated_at == ended.updated_at


def test_an_unknown_run_is_a_404() -> None:
    with pytest.raises(AgentRunError) as missing:
        heartbeat_run(run_id="run_missing", runner_id="r", lease_epoch=1, lease_ms=LEASE_MS)
    assert missing.value.http_status == 404


def test_a_heartbeat_waiting_on_a_takeover_is_fenced_by_the_new_claim() -> None:
    """A takeover holds the run's lock (as `claim_run` does after a lease expired) while the
    old runner's heartbeat arrives: the heartbeat's UPDATE waits for the lock, then
    re-checks its fence on the row the takeover committed, and is refused; the new
    runner's lease stands. The ORM's path and the one statement must agree on this."""
    run = make_claimed_run(runner_id="runner-old", lease_ms=1)
    takeover_expiry = timezone.now() + timedelta(minutes=5)
    locked, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def take_over() -> None:
        try:
            with transaction.atomic():
                taken = lock_run(run.id)
                locked.set()
                release.wait(timeout=60)
                taken.claimed_by, taken.lease_epoch = "runner-new", taken.lease_epoch + 1
                taken.lease_expires_at = takeover_expiry
                taken.save(update_fields=["claimed_by", "lease_epoch", "lease_expires_at"])
                Lease.objects.filter(run=taken).update(
                    runner_id="runner-new", lease_epoch=2, lease_expires_at=takeover_expiry
                )
        finally:
            connection.close()

    def heartbeat() -> None:
        try:
            heartbeat_run(run_id=run.id, runner_id="runner-old", lease_epoch=1, lease_ms=LEASE_MS)
            outcome["answer"] = "extended"
        except AgentRunError as error:
            outcome["answer"] = error.code
        finally:
            connection.close()

    holder = threading.Thread(target=take_over)
    holder.start()
    assert locked.wait(timeout=60)
    beating = threading.Thread(target=heartbeat)
    beating.start()
    waiting = _wait_for_lock_wait()
    release.set()
    holder.join(timeout=60)
    beating.join(timeout=60)

    assert waiting, "the heartbeat never waited on the run's lock"
    assert outcome["answer"] == "stale_lease"
    stored, lease = Run.objects.get(pk=run.pk), Lease.objects.get(run=run)
    assert (stored.claimed_by, stored.lease_epoch) == ("runner-new", 2)
    assert stored.lease_expires_at == lease.lease_expires_at == takeover_expiry
    assert [event.payload["runner_id"] for event in late_writes(run)] == ["runner-old"]


def _wait_for_lock_wait() -> bool:
    """Whether a backend came to wait on a row lock (the heartbeat's UPDATE behind the
    takeover), polled on a condition rather than slept on."""
    deadline = timezone.now() + timedelta(seconds=60)
    while timezone.now() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND pid <> pg_backend_pid() AND query LIKE %s",
                ["%agentrun_runs%"],
            )
            if cursor.fetchone()[0]:
                return True
        threading.Event().wait(0.01)
    return False
