"""Retry an intent now: the operator's "do not wait for the backoff" (admin action).

An open intent that waits — `retry` after a failed launch, or `pending` given back over
capacity — is made due at once, so the next dispatch pass claims it. It is decided under
the run lock, then the intent lock (the order of every settle), so it races neither a
claim (a claimed intent is `dispatching` and is left to its worker) nor a cancel (a
terminal run's intent is fenced, never revived). Final intents (`dispatched`, `failed`,
`cancelled`) are never reopened: a `failed` intent's run failed with it, and nothing moves
a run out of terminal — retry the queue task or file a new turn instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from agentrun.errors import not_found
from dispatch.locks import lock_intent
from dispatch.models import IntentState, RunnerDispatchIntent
from dispatch.services.failures import intent_phase
from dispatch.wakeup import wake_dispatcher_for_due
from runs.locks import lock_run
from runs.models import Run
from runs.phases import Phase
from runs.services.event_log import append_event_locked

WAITING_STATES = (IntentState.PENDING, IntentState.RETRY)


@dataclass(frozen=True)
class RetryNow:
    """What `retry_intent_now` did: `changed` is False when it refused, with `reason`."""

    intent: RunnerDispatchIntent
    changed: bool
    reason: str


def retry_intent_now(*, intent_id: str, requested_by: str) -> RetryNow:
    """Make a waiting intent due now and wake the dispatcher.

    Locks: the intent's run row, then the intent. Side effects: `next_attempt_at = now`,
    a `backend_status {phase: runner-dispatch-retry-requested}` event naming who asked;
    after commit, a dispatcher wake-up. Refuses (changes nothing) when the run is
    terminal, the intent is claimed or final, or it is already due. Errors: 404.
    """
    run_id = RunnerDispatchIntent.objects.filter(pk=intent_id).values_list("run_id", flat=True)
    if not run_id:
        raise not_found("dispatch intent", intent_id)
    with transaction.atomic(durable=True):
        run = lock_run(run_id[0])
        intent = lock_intent(intent_id)
        refusal = _refusal(run, intent)
        if refusal is None:
            _make_due_locked(run, intent, requested_by=requested_by)
            transaction.on_commit(wake_dispatcher_for_due)
    return RetryNow(intent, changed=refusal is None, reason=refusal or "due now")


def _refusal(run: Run, intent: RunnerDispatchIntent) -> str | None:
    """Why the intent cannot be made due now, or None."""
    if run.is_terminal:
        return f"its run {run.id} is {run.status}: nothing moves a run out of terminal"
    if intent.state == IntentState.DISPATCHING:
        return "a dispatcher holds it right now"
    if intent.state not in WAITING_STATES:
        return f"it is {intent.state}, a final state"
    if intent.next_attempt_at <= timezone.now():
        return "it is already due: the next dispatch pass claims it"
    return None


def _make_due_locked(run: Run, intent: RunnerDispatchIntent, *, requested_by: str) -> None:
    """Set the due time to now and record who asked. Needs the run and intent locks."""
    now = timezone.now()
    waited_until = intent.next_attempt_at
    intent.next_attempt_at = intent.updated_at = now
    intent.save(update_fields=["next_attempt_at", "updated_at"])
    append_event_locked(
        run=run,
        type="backend_status",
        payload={
            **intent_phase(Phase.RUNNER_DISPATCH_RETRY_REQUESTED, intent),
            "was_due_at": waited_until.isoformat(),
            "requested_by": requested_by,
        },
    )
