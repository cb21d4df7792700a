"""Recording and fencing dispatch intents, inside the caller's transaction.

This is the dispatch module of the projection tier (SPEC §9.1): functions the `runs`
services call inside the run's transaction, in lock order (run → commands → session →
queue → key lock), each named `*_locked`. A projection module imports only the models,
locks and versions of `runs` and of its own app, plus `agentrun`
(`tests/test_projection_layers.py`).

These are not services of their own: they run inside the runs/sessions service that
creates or terminalises the command, under that service's run lock, so an intent and its
command commit together and a terminal run never keeps an open intent. `intent_of` is the
dispatch selector, named in `__all__` here because `runs` may read from dispatch only
through this module (a replayed command checks its recorded request).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentrun.errors import conflict
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from dispatch.models import OPEN_INTENT_STATES, IntentState, RunnerDispatchIntent
from dispatch.selectors import intent_of
from dispatch.wakeup import wake_dispatcher
from runs.models import Command, Run

__all__ = [
    "check_intent_replay",
    "fence_open_intents_locked",
    "intent_of",
    "record_intent_locked",
]


def record_intent_locked(
    *, run: Run, command: Command, request: dict[str, Any]
) -> RunnerDispatchIntent:
    """Write the dispatch intent of a new command. Needs the run lock.

    `request` is the command's `dispatch` object (`{}` = the default launcher). After
    commit, wakes the dispatcher (`dispatch.wakeup`) so the intent is claimed at once.
    """
    now = timezone.now()
    transaction.on_commit(wake_dispatcher)
    return RunnerDispatchIntent.objects.create(
        id=new_id("rdi"),
        run=run,
        command=command,
        kind="runner-job",
        input=request,
        input_hash=stable_hash(request),
        state=IntentState.PENDING,
        runner_job_id=new_id("rjob"),
        next_attempt_at=now,
        created_at=now,
        updated_at=now,
    )


def check_intent_replay(
    *, command: Command, intent: RunnerDispatchIntent | None, request: dict[str, Any] | None
) -> None:
    """A replayed command may not change its dispatch request (seed
    `assertRunnerDispatchReplay`): 409 when the request differs from the recorded one."""
    if request is None or (intent is not None and intent.input_hash == stable_hash(request)):
        return
    raise conflict(
        f"command {command.id} was created with a different dispatch request",
        code="idempotency_mismatch",
        command_id=command.id,
    )


def fence_open_intents_locked(*, run: Run, command: Command | None = None, reason: str) -> int:
    """Cancel the open intents of a run (or of one command) that went terminal. Needs the
    run lock. A worker still holding such a claim is refused when it reports back."""
    scope = Q(run=run) if command is None else Q(command=command)
    now = timezone.now()
    return RunnerDispatchIntent.objects.filter(scope, state__in=OPEN_INTENT_STATES).update(
        state=IntentState.CANCELLED,
        lease_owner=None,
        lease_expires_at=None,
        last_error={"reason": reason, "fenced": True},
        updated_at=now,
    )
