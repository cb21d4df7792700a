"""`agentrun/locks.py` and the outbox key lock take the seed's advisory lock keys, so an
old manager and this one sharing a database exclude each other (issue 17 item 11). The
other side of each test is the seed's own statement, on another connection."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from agentrun.locks import LockKey, advisory_session_lock, advisory_xact_lock, advisory_xact_lock_on

# What the seed's store runs (postgres-store: withRunnerCreateFence, appendEventWithLockedRun).
SEED_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext(%s), hashtext(%s))"


def _seed_manager_gets(namespace: str, value: str) -> bool:
    """Whether an old manager, on its own connection, would get the lock right now."""
    got: list[bool] = []

    def attempt() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(SEED_TRY_LOCK, [namespace, value])
                got.append(bool(cursor.fetchone()[0]))
        finally:
            connection.close()

    thread = threading.Thread(target=attempt)
    thread.start()
    thread.join(timeout=30)
    assert len(got) == 1, "the seed-side lock attempt did not finish"
    return got[0]


@pytest.mark.django_db(transaction=True)
def test_the_runner_create_fence_excludes_the_seeds_fence_on_the_same_profile() -> None:
    assert _seed_manager_gets("agentrun-runner-create", "codex")
    with advisory_session_lock(LockKey.RUNNER_CREATE, "codex"):
        assert not _seed_manager_gets("agentrun-runner-create", "codex")
        assert _seed_manager_gets("agentrun-runner-create", "deepseek")
    assert _seed_manager_gets("agentrun-runner-create", "codex")


@pytest.mark.django_db(transaction=True)
def test_the_outbox_key_lock_and_registry_locks_are_the_seeds_transaction_locks() -> None:
    with transaction.atomic():
        advisory_xact_lock_on("agentrun.events", "tenant-a:s-1")  # the outbox writer's key lock
        advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, "s-locked")
        held = [
            _seed_manager_gets("agentrun.events", "tenant-a:s-1"),
            _seed_manager_gets("agentrun-session-turn-admission", "s-locked"),
            _seed_manager_gets("agentrun.events", "tenant-a:s-2"),
        ]
    assert held == [False, False, True]  # the seed's (topic, key) and (name, value) shapes
    assert _seed_manager_gets("agentrun.events", "tenant-a:s-1")  # released at commit
