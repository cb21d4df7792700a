"""Which claimed intents fit a limited backend profile's runner slots, and which wait.

A profile's `capacity.max_concurrent_runs` is shared by tenants, who are mutually
untrusted (issue 16): without a per-tenant bound one tenant's backlog would take every
slot and hold it, and other tenants' runs would wait behind it. So each tenant gets a cap:

- the operator's ceiling, `AGENTRUN_TENANT_RUNNER_SHARE_PERCENT` of the limit (at least one
  slot; 100 by default, no ceiling);
- below it, while several tenants contend for the profile (they have runs holding a runner
  or open intents), the fair share: the limit divided among them, rounded up. A tenant
  alone may use every slot, so no slot idles for fairness' sake.

Runs already holding slots are never taken back: a tenant over its share gets no new slot
until its own runs finish, and the freed slots go to the tenants under theirs. An intent
over its tenant's cap waits, exactly as one over the profile's limit: it is deferred, its
attempt not counted. Decided under the runner-create fence (`dispatch.services.launch`),
which serialises every launch of the profile, so the counts cannot go stale meanwhile.
"""

from __future__ import annotations

import math

from agentrun import conf
from dispatch import selectors
from dispatch.services.claims import IntentClaim


def within_capacity(
    profile: str, claims: list[IntentClaim]
) -> tuple[list[IntentClaim], list[IntentClaim]]:
    """Split claims into those that fit the profile's free slots and their tenants' caps,
    and those that wait. A run that already holds a runner takes no new slot."""
    limit = selectors.max_concurrent_runs(profile)
    if limit is None:
        return claims, []
    held, holding = selectors.active_runs_by_tenant(
        profile=profile, among=[claim.run_id for claim in claims]
    )
    contending = selectors.contending_tenants(profile) | {claim.tenant_id for claim in claims}
    cap = tenant_cap(limit, contending=len(contending | set(held)))
    free = limit - sum(held.values())
    fits, waits = [], []
    for claim in claims:
        if claim.run_id in holding:
            fits.append(claim)
            continue
        if free <= 0 or held.get(claim.tenant_id, 0) >= cap:
            waits.append(claim)
            continue
        holding.add(claim.run_id)
        held[claim.tenant_id] = held.get(claim.tenant_id, 0) + 1
        free -= 1
        fits.append(claim)
    return fits, waits


def tenant_cap(limit: int, *, contending: int) -> int:
    """The most slots of a profile with `limit` slots one of `contending` tenants may hold."""
    ceiling = max(1, limit * conf.tenant_runner_share_percent() // 100)
    fair = math.ceil(limit / contending) if contending > 1 else limit
    return min(ceiling, fair)
