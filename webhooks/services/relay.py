"""The webhook relay: one bounded batch in the three steps of house rule 19.

1. Claim (a short transaction, committed before any request): each (endpoint, key)'s due
   prefix, up to `PER_KEY` deliveries, leased to this batch (`webhooks.locks`).
2. Send, with no transaction open: the keys run in parallel on up to
   `AGENTRUN_WEBHOOK_CONCURRENCY` threads; within a key the deliveries go one after the
   other in `seq` order, and the first that fails stops its key, so a later event of a key
   is never sent before the earlier one was delivered.
3. Settle (one short transaction): every claim fenced by (seq, lease owner, live lease):
   delivered; failed (back off with `agentrun.backoff`, capped and jittered); or released
   unattempted behind its failed head. Endpoints with a success in the batch stop failing;
   the others start (or keep) failing, and one failing longer than
   `AGENTRUN_WEBHOOK_DISABLE_AFTER_S` is disabled, logged as a warning.

At least once, in order per key: a worker killed between send and settle leaves its claims
leased; they come back when the lease lapses and are sent again with the same
`webhook-id`, which receivers dedupe by.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import timedelta
from itertools import groupby

from django.db import transaction
from django.utils import timezone

from agentrun import conf
from agentrun.backoff import backoff_ms
from agentrun.leased_batches import BatchCounts
from agentrun.leases import lease_owner
from outbox.cloudevents import cloud_event
from runs.models import Event
from webhooks.locks import Claim, claim_due_deliveries
from webhooks.models import WebhookEndpoint
from webhooks.sender import Attempt, Sender, signed_headers
from webhooks.services.secrets import signing_secrets
from webhooks.sql import settle_deliveries

logger = logging.getLogger("webhooks.relay")
PER_KEY = 20  # deliveries of one key per batch: sent one after the other


@dataclass(frozen=True)
class WebhookRelayResult(BatchCounts):
    """A batch's counts (`agentrun.leased_batches.BatchCounts`), plus its failed attempts,
    the deliveries released unattempted behind a failed head, and endpoints disabled."""

    failed: int = 0
    released: int = 0
    disabled: int = 0
    more: bool = False  # a full batch, or a key with more due behind its claimed prefix


@dataclass(frozen=True)
class _Outcome:
    claim: Claim
    outcome: str  # delivered | failed | released
    attempt: Attempt | None


def relay_webhook_batch(*, limit: int | None = None) -> WebhookRelayResult:
    """Send one batch of due deliveries (at most `AGENTRUN_WEBHOOK_BATCH_SIZE`).

    Locks: the claimed rows, only inside the claim transaction. Side effects: HTTP requests
    between the claim and the settle; endpoints disabled after continuous failure.
    """
    limit = limit or conf.webhook_batch_size()
    owner = lease_owner("whrelay")
    lease_ms = conf.webhook_lease_ms()
    with transaction.atomic(durable=True):
        claims = claim_due_deliveries(owner=owner, lease_ms=lease_ms, limit=limit, per_key=PER_KEY)
    if not claims:
        return WebhookRelayResult()
    outcomes = _send_all(claims, send_until=time.monotonic() + lease_ms / 2000)
    settled, disabled = settle_webhook_batch(outcomes=outcomes)
    counts = {
        name: sum(1 for v in settled.values() if v == name)
        for name in ("delivered", "failed", "released")
    }
    deep = any(len(list(items)) >= PER_KEY for _, items in groupby(claims, _key_of))
    return WebhookRelayResult(
        claimed=len(claims),
        refused=len(claims) - len(settled),
        disabled=disabled,
        more=len(claims) >= limit or deep,
        **counts,
    )


def _key_of(claim: Claim) -> tuple[str, str]:
    return (claim.endpoint_id, claim.partition_key)


def _send_all(claims: list[Claim], *, send_until: float) -> list[_Outcome]:
    """Send every key's claims (keys in parallel, each key in order). The envelopes and
    endpoints are read once, before any request, on this thread's connection."""
    bodies = _bodies({claim.event_id for claim in claims})
    endpoints = WebhookEndpoint.objects.in_bulk({claim.endpoint_id for claim in claims})
    keys = [
        list(items)
        for _, items in groupby(sorted(claims, key=lambda c: (_key_of(c), c.seq)), _key_of)
    ]

    def send_key(items: list[Claim]) -> list[_Outcome]:
        endpoint = endpoints[items[0].endpoint_id]
        secrets = signing_secrets(endpoint)
        with closing(Sender(endpoint.url)) as sender:  # one kept-alive connection per key
            return _send_key(items, bodies, secrets, sender, send_until)

    workers = max(1, min(conf.webhook_concurrency(), len(keys)))
    with ThreadPoolExecutor(workers, thread_name_prefix="webhook-send") as pool:
        return [outcome for key_outcomes in pool.map(send_key, keys) for outcome in key_outcomes]


def _send_key(
    items: list[Claim], bodies: dict[str, str], secrets: list[str], sender: Sender, until: float
) -> list[_Outcome]:
    """One key's claims in `seq` order; after a failure, or past `until`, the rest are
    released unattempted."""
    outcomes: list[_Outcome] = []
    for claim in items:
        blocked = bool(outcomes) and outcomes[-1].outcome != "delivered"
        if blocked or time.monotonic() > until:
            outcomes.append(_Outcome(claim, "released", None))
            continue
        body = bodies[claim.event_id]
        headers = signed_headers(secrets=secrets, msg_id=claim.event_id, body=body)
        headers["agentrun-webhook-seq"] = str(claim.seq)
        attempt = sender.send(body=body.encode(), headers=headers)
        outcomes.append(_Outcome(claim, "delivered" if attempt.ok else "failed", attempt))
    return outcomes


def _bodies(event_ids: set[str]) -> dict[str, str]:
    """Each event's CloudEvents envelope as the JSON text that is sent and signed."""
    source = conf.kafka_source()
    bodies = {}
    for event in Event.objects.filter(pk__in=event_ids).select_related("run"):
        key = f"{event.run.tenant_id}:{event.run.session_id or event.run.id}"
        envelope = cloud_event(run=event.run, event=event, partition_key=key, source=source)
        bodies[event.id] = json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)
    return bodies


def _token(outcome: _Outcome) -> dict[str, object]:
    attempt = outcome.attempt
    delay = 0
    if outcome.outcome == "failed":
        delay = backoff_ms(
            outcome.claim.attempt_count + 1,
            base_ms=conf.webhook_backoff_base_ms(),
            cap_ms=conf.webhook_backoff_cap_ms(),
        )
    return {
        "seq": outcome.claim.seq,
        "lease_owner": outcome.claim.lease_owner,
        "outcome": outcome.outcome,
        "delay_ms": delay,
        "status_code": attempt.status_code if attempt else None,
        "response": (attempt.response if attempt else "")[:2_000],
        "error": (attempt.error if attempt else "")[:1_000],
    }


def settle_webhook_batch(*, outcomes: list[_Outcome]) -> tuple[dict[int, str], int]:
    """Step 3 (see module doc): one transaction; returns (seq → settled outcome, endpoints
    disabled). Locks: the settled rows and the batch's endpoint rows, until commit."""
    tokens = [_token(outcome) for outcome in outcomes]
    ok = {o.claim.endpoint_id for o in outcomes if o.outcome == "delivered"}
    failing = {o.claim.endpoint_id for o in outcomes if o.outcome == "failed"} - ok
    with transaction.atomic(durable=True):
        settled = settle_deliveries(tokens)
        disabled = _record_health(ok=ok, failing=failing)
    if any(v == "failed" for v in settled.values()):
        logger.info(
            "webhook batch settled with failures: %d", sum(v == "failed" for v in settled.values())
        )
    return settled, disabled


def _record_health(*, ok: set[str], failing: set[str]) -> int:
    """Clear `failing_since` of endpoints that answered 2xx; start it for those that only
    failed; disable the ones failing for longer than the configured time. Needs the
    settle's transaction."""
    now = timezone.now()
    WebhookEndpoint.objects.filter(pk__in=ok, failing_since__isnull=False).update(
        failing_since=None, updated_at=now
    )
    WebhookEndpoint.objects.filter(pk__in=failing, failing_since__isnull=True).update(
        failing_since=now, updated_at=now
    )
    cutoff = now - timedelta(seconds=conf.webhook_disable_after_s())
    stale = WebhookEndpoint.objects.filter(pk__in=failing, enabled=True, failing_since__lte=cutoff)
    disabled = list(stale.values_list("pk", "tenant_id", "failing_since"))
    if disabled:
        reason = f"failed continuously for more than {conf.webhook_disable_after_s()} s"
        stale.update(enabled=False, disabled_reason=reason, updated_at=now)
    for endpoint_id, tenant_id, since in disabled:
        logger.warning(
            "webhook endpoint disabled after continuous failure",
            extra={"endpoint_id": endpoint_id, "tenant_id": tenant_id, "failing_since": str(since)},
        )
    return len(disabled)
