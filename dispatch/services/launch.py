"""The dispatch step: claim a bounded batch of intents, launch their runner jobs, settle.

`dispatch_batch` is what the Celery task, `manage.py dispatch_once` and the tests call.
For one batch:

1. claim up to `limit` due intents (one transaction, SKIP LOCKED: see `claims`); the
   claim also returns each run's profile capacity;
2. per backend profile with a `capacity.max_concurrent_runs`, hold the runner-create
   fence (a session advisory lock on `LockKey.RUNNER_CREATE` + profile, entered outside
   any transaction) while counting the profile's active runs, launching, and committing
   the completions: no two workers can both see the last free slot. A profile without a
   limit has no slot to race for and takes no fence, so its batches run in parallel;
3. over capacity, or over its tenant's share of it (`capacity`) → the intent is given
   back, due after a short wait, its attempt not counted; a launch error → retry with
   backoff, or terminalise after the last attempt;
4. each claim is launched with its runner key, written by the claim's own statement (one
   autocommitted round trip before the first launch); a claim that is not launched gets
   its key revoked;
5. the launched intents are completed in one set-based transaction; a claim refused as
   stale (its run was cancelled meanwhile) gets its launch aborted and its key revoked.

No transaction is open during a launch (rule 7): the runner keys are committed with the
claim, the outcome in a new transaction after. A worker dying mid-batch leaves `dispatching` intents
whose lease expires; the next claim takes them again (attempt + 1).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from django.utils import timezone

from agentrun import conf
from agentrun.backoff import backoff_ms
from agentrun.leases import lease_owner
from agentrun.locks import LockKey, advisory_session_lock
from agentrun.metrics import count_dispatch
from agentrun.models import ApiKey
from dispatch.launchers import (
    Launched,
    Launcher,
    LaunchError,
    LaunchRequest,
    default_launchers,
    launcher_for,
)
from dispatch.services.capacity import within_capacity
from dispatch.services.claims import (
    Completion,
    IntentClaim,
    RunnerKey,
    StaleClaimError,
    claim_intents_with_keys,
    complete_intents,
    defer_intents,
)
from dispatch.services.failures import retry_intent, terminalize_intent

logger = logging.getLogger(__name__)


@dataclass
class DispatchCounts:
    claimed: int = 0
    dispatched: int = 0
    waiting: int = 0  # over capacity, given back
    retried: int = 0
    failed: int = 0  # terminalised after the last attempt
    fenced: int = 0  # the claim went stale (run or command terminal, or re-claimed)

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))  # the fields are ints: `asdict`'s deep copy is not needed


def dispatch_batch(
    *,
    owner: str | None = None,
    limit: int | None = None,
    launchers: Mapping[str, Launcher] | None = None,
) -> DispatchCounts:
    """Claim one bounded batch and dispatch it; returns the counts.

    Must be called outside a transaction (it may take the session-level runner-create
    fence and commits several short transactions). Launchers default to `local` and
    `kubernetes`.
    """
    keyed = claim_intents_with_keys(
        owner=owner or lease_owner("dispatch"),
        lease_ms=conf.dispatch_lease_ms(),
        limit=limit or conf.dispatch_batch_size(),
    )
    counts = DispatchCounts(claimed=len(keyed))
    launchers = launchers or default_launchers()
    keys = {claim.id: key for claim, key in keyed}
    by_profile: dict[str, list[IntentClaim]] = {}
    for claim, _ in keyed:
        by_profile.setdefault(claim.backend_profile, []).append(claim)
    for profile, group in sorted(by_profile.items()):
        if all(claim.capacity_limit is None for claim in group):
            # No limit: there is no last free slot to race for, so no fence (a limit set
            # meanwhile applies from the next batch).
            _dispatch(group, keys, launchers, counts)
            continue
        with advisory_session_lock(LockKey.RUNNER_CREATE, profile):
            to_launch, waiting = within_capacity(profile, group)
            _defer(profile, waiting, counts)
            _revoke([keys[claim.id].id for claim in waiting])
            _dispatch(to_launch, keys, launchers, counts)
    count_dispatch(counts.as_dict())  # every transaction of the batch has committed
    return counts


def _defer(profile: str, waiting: list[IntentClaim], counts: DispatchCounts) -> None:
    if waiting:
        counts.waiting += defer_intents(
            claims=waiting,
            delay_ms=conf.dispatch_capacity_wait_ms(),
            why={"reason": "capacity", "backend_profile": profile},
        )


def _dispatch(
    claims: list[IntentClaim],
    keys: Mapping[str, RunnerKey],
    launchers: Mapping[str, Launcher],
    counts: DispatchCounts,
) -> None:
    """Launch the claims and complete the launched ones in one transaction."""
    launched = _launch_all(claims, keys, launchers, counts)
    if not launched:
        return
    outcome = complete_intents(completions=launched)
    counts.dispatched += outcome.dispatched
    for refused, error in outcome.refused:
        counts.fenced += 1
        logger.info("dispatch: %s; aborting %s", error.message, refused.launched.job_name)
        _revoke([keys[refused.claim.id].id])
        _abort(refused.launched, launchers)


def _launch_all(
    claims: list[IntentClaim],
    keys: Mapping[str, RunnerKey],
    launchers: Mapping[str, Launcher],
    counts: DispatchCounts,
) -> list[Completion]:
    """Launch each claim with its runner key; settle the ones that cannot launch, and
    revoke their keys (one UPDATE)."""
    launched, unused = [], []
    for claim in claims:
        key = keys[claim.id]
        launcher = _launcher(claim, launchers, counts)
        if launcher is None:
            unused.append(key.id)
            continue
        try:
            launched.append(Completion(claim, launcher.launch(_request(claim, key.secret))))
        except LaunchError as error:
            unused.append(key.id)
            _settle_failure(claim, error, counts)
    _revoke(unused)
    return launched


def _launcher(
    claim: IntentClaim, launchers: Mapping[str, Launcher], counts: DispatchCounts
) -> Launcher | None:
    """The claim's launcher, or None after settling a claim that cannot be launched."""
    if claim.attempt_count > conf.dispatch_max_attempts():
        # Earlier attempts were claimed by workers that died before settling them.
        _settle_failure(claim, LaunchError("dispatch attempts exhausted", reason="lost"), counts)
        return None
    try:
        return launcher_for(claim.options, launchers)
    except LaunchError as error:
        _settle_failure(claim, error, counts)
        return None


def _request(claim: IntentClaim, secret: str) -> LaunchRequest:
    return LaunchRequest(
        intent_id=claim.id,
        run_id=claim.run_id,
        command_id=claim.command_id,
        tenant_id=claim.tenant_id,
        backend_profile=claim.backend_profile,
        runner_job_id=claim.runner_job_id,
        runner_id=claim.runner_id,
        attempt_count=claim.attempt_count,
        runner_key=secret,
        api_url=conf.api_url(),
        options=claim.options,
        session_id=claim.session_id,
    )


def _settle_failure(claim: IntentClaim, error: LaunchError, counts: DispatchCounts) -> None:
    """Retry with backoff, or terminalise after the last attempt."""
    logger.warning("dispatch %s attempt %s failed: %s", claim.id, claim.attempt_count, error)
    try:
        if claim.attempt_count >= conf.dispatch_max_attempts():
            terminalize_intent(claim=claim, error=error.as_json())
            counts.failed += 1
            return
        delay = backoff_ms(
            claim.attempt_count,
            base_ms=conf.dispatch_backoff_base_ms(),
            cap_ms=conf.dispatch_backoff_cap_ms(),
        )
        retry_intent(claim=claim, error=error.as_json(), delay_ms=delay)
        counts.retried += 1
    except StaleClaimError as stale:
        logger.info("dispatch: %s", stale.message)
        counts.fenced += 1


def _revoke(key_ids: list[str]) -> None:
    """Revoke the runner keys of launches that did not happen or were aborted. An update
    of keys nobody else has seen; auth has no revoke service yet."""
    if key_ids:
        ApiKey.objects.filter(pk__in=key_ids, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )


def _abort(launched: Launched, launchers: Mapping[str, Launcher]) -> None:
    launcher = launchers.get(launched.launcher)
    if launcher is None:
        return
    try:
        launcher.abort(launched)
    except LaunchError as error:  # best effort: reconciliation finds what is left
        logger.warning("dispatch: could not abort %s: %s", launched.job_name, error)
