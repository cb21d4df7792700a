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

`dispatch_request_errors` is what the API checks a client's `dispatch` object with: a
client may at most name one of the operator's launch profiles (`{"launch_profile":
"gpu"}`, or `{}` for `default`); launchers, images, namespaces and service accounts are
the profile's, never the request's (issue 16 finding 2).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agentrun import conf
from agentrun.errors import conflict
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from agentrun.row_inserts import insert_row
from dispatch.models import OPEN_INTENT_STATES, IntentState, RunnerDispatchIntent
from dispatch.selectors import intent_of
from dispatch.wakeup import wake_dispatcher
from runs.models import Command, Run

__all__ = [
    "BUILT_IN_LAUNCHERS",
    "check_intent_replay",
    "dispatch_request_errors",
    "fence_open_intents_locked",
    "intent_of",
    "record_intent_locked",
]

BUILT_IN_LAUNCHERS = ("local", "kubernetes")


def dispatch_request_errors(request: dict[str, Any]) -> dict[str, list[str]]:
    """Key → why a client's `dispatch` object is refused; empty when it may be recorded."""
    errors: dict[str, list[str]] = {
        key: ["not a dispatch option; name a launch profile with launch_profile"]
        for key in sorted(set(request) - {"launch_profile"})
    }
    name = request.get("launch_profile", "default")
    profiles = conf.launch_profiles()
    if not isinstance(name, str) or name not in profiles:
        errors["launch_profile"] = [f"unknown launch profile {name!r}; known: {sorted(profiles)}"]
        return errors
    launcher = profiles[name].get("launcher") or conf.launcher()
    if launcher not in {*BUILT_IN_LAUNCHERS, *conf.extra_launchers()}:
        # An operator's mistake, but a 400 now beats five failed launch attempts later.
        errors["launch_profile"] = [f"launch profile {name!r} names unknown launcher {launcher!r}"]
    return errors


def record_intent_locked(
    *, run: Run, command: Command, request: dict[str, Any]
) -> RunnerDispatchIntent:
    """Write the dispatch intent of a new command. Needs the run lock.

    `request` is the command's `dispatch` object (`{}` = the default launcher). After
    commit, wakes the dispatcher (`dispatch.wakeup`) so the intent is claimed at once.
    """
    now = timezone.now()
    transaction.on_commit(wake_dispatcher)
    intent = RunnerDispatchIntent(
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
    insert_row(intent)  # now, or with the caller's other new rows (`agentrun.row_inserts`)
    return intent


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
