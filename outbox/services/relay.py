"""The relay: Kafka delivery of outbox records, in the three steps of house rule 19.

1. Claim (one short transaction, committed before any I/O): the due, unleased prefix of
   each partition key, leased to this batch's owner (`outbox.locks.claim_due_records`).
2. Produce, with no transaction open, in `outbox_seq` order, and wait for every delivery
   report (`outbox.kafka.deliver`).
3. Settle (one short transaction): per key in `outbox_seq` order, complete acknowledged
   records, each fenced by (lease owner, attempt count, live lease). At the first failure,
   that record and every later claimed record of its key go back to retry with one backoff
   (doubling, capped, jittered) and the redacted error. A refused completion (the lease
   expired; another worker may own the record now) stops its key: a later record is never
   marked delivered before an earlier one.

The guarantee is at-least-once, in order per key: a record whose outcome is unknown is sent
again, and consumers dedupe by event id. Batches are safe on any number of workers at once.
One gap remains, which librdkafka documents for idempotent producers: if a broker comes
back while a batch's messages are timing out, a later message of a key can be acknowledged
after an earlier one timed out. Both are then sent again in order, so a consumer sees the
later event once early and once in place; its per-run `seq` header shows the gap.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from datetime import timedelta
from itertools import groupby
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, transaction
from django.db.models.functions import Now
from django.utils import timezone

from agentrun.ids import new_id
from agentrun.metrics import count_relay
from agentrun.redaction import redact_json
from outbox.cloudevents import encode_value
from outbox.kafka import (
    DeliveryFailure,
    OutgoingMessage,
    deliver,
    discard_producer,
    ensure_topics,
    outbox_enabled,
    outbox_topic,
)
from outbox.locks import claim_due_records
from outbox.models import KafkaEventOutbox

logger = logging.getLogger("outbox.relay")
Outcome = tuple[KafkaEventOutbox, DeliveryFailure | None]


@dataclass(frozen=True)
class RelayResult:
    claimed: int = 0
    delivered: int = 0
    retried: int = 0
    refused: int = 0

    def __add__(self, other: RelayResult) -> RelayResult:
        return RelayResult(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def relay_outbox_batch(*, limit: int | None = None, owner: str | None = None) -> RelayResult:
    """Relay one bounded batch (at most `AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE` records).

    Locks: the claimed rows, only inside the claim and the settle transactions. Side
    effects: Kafka produce between the two. Does nothing when the outbox is off.
    """
    if not outbox_enabled():
        return RelayResult()
    ensure_topics({outbox_topic()})
    claims = claim_outbox_records(
        owner=owner or new_relay_owner(),
        limit=limit or int(settings.AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE),
        lease_ms=int(settings.AGENTRUN_KAFKA_OUTBOX_LEASE_MS),
    )
    if not claims:
        return RelayResult()
    outcomes = deliver([message_of(claim) for claim in claims])
    settled = settle_outbox_records(claims=claims, outcomes=outcomes)
    result = RelayResult(len(claims), settled.delivered, settled.retried, settled.refused)
    count_relay(result.as_dict())  # the settle has committed
    return result


def run_relay_loop(
    *, stop: threading.Event, idle_seconds: float = 1.0, limit: int | None = None
) -> RelayResult:
    """Relay batch after batch until `stop` is set (`relay_outbox --loop`).

    Sleeps only after a batch that found nothing; setting `stop` lets the running batch
    finish and ends the loop. A lost database connection is logged and retried after the
    idle sleep (records a failed batch had claimed come back when their lease lapses).
    Returns the totals.
    """
    totals = RelayResult()
    try:
        while not stop.is_set():
            try:
                result = relay_outbox_batch(limit=limit)
            except (OperationalError, InterfaceError) as error:
                logger.warning("outbox relay batch failed on the database: %s", error)
                close_old_connections()
                result = RelayResult()
            totals += result
            if result.claimed == 0:
                stop.wait(idle_seconds)
    finally:
        discard_producer()  # nothing is in flight between batches; free the connections
    return totals


def new_relay_owner() -> str:
    """A lease owner naming the host and process, unique per batch."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('relay')}"


def claim_outbox_records(*, owner: str, limit: int, lease_ms: int) -> list[KafkaEventOutbox]:
    """Step 1: lease the due prefix of each key to `owner`, committed before returning.

    Locks: `FOR UPDATE SKIP LOCKED` on the claimed rows until this transaction commits.
    """
    with transaction.atomic():
        return claim_due_records(owner=owner, lease_ms=lease_ms, limit=limit)


def message_of(record: KafkaEventOutbox) -> OutgoingMessage:
    headers: list[tuple[str, str | bytes | None]] = [
        (str(name), str(value).encode()) for name, value in record.headers.items()
    ]
    return OutgoingMessage(record.topic, record.partition_key, encode_value(record.value), headers)


@dataclass(frozen=True)
class Settled:
    delivered: int = 0
    retried: int = 0
    refused: int = 0

    def __add__(self, other: Settled) -> Settled:
        return Settled(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


def settle_outbox_records(
    *, claims: list[KafkaEventOutbox], outcomes: list[DeliveryFailure | None]
) -> Settled:
    """Step 3: record each claim's outcome; `outcomes[i]` is None when Kafka acked it.

    One transaction. Every update is a compare-and-set on the claim, so a stale claim (an
    expired lease, a record another worker reclaimed, a dead worker's late report) changes
    nothing and is counted as refused. The acknowledged prefix of every key is completed
    in one statement when the whole claim is still live (the usual case), else record by
    record in key order, stopping each key at its first refusal.
    """
    keys = list(_by_key(list(zip(claims, outcomes, strict=True))))
    acked = [claim for items in keys for claim in _acked_prefix(items)]
    with transaction.atomic():
        if _complete_all(acked):
            settled = Settled(delivered=len(acked))
            for items in keys:
                settled += _retry_from_first_failure(items)
        else:
            settled = Settled()
            for items in keys:
                settled += _settle_key(items)
    if settled.retried or settled.refused:
        logger.warning("outbox relay batch settled with problems: %s", settled)
    return settled


def _by_key(outcomes: list[Outcome]) -> Iterator[list[Outcome]]:
    """The outcomes grouped by (topic, partition key), each group in `outbox_seq` order."""
    ordered = sorted(outcomes, key=lambda o: (o[0].topic, o[0].partition_key, o[0].outbox_seq))
    for _, items in groupby(ordered, key=lambda o: (o[0].topic, o[0].partition_key)):
        yield list(items)


def _acked_prefix(items: list[Outcome]) -> list[KafkaEventOutbox]:
    """A key's claims up to (not including) its first failure."""
    prefix = []
    for claim, failure in items:
        if failure is not None:
            break
        prefix.append(claim)
    return prefix


class _StaleClaim(Exception):
    pass


def _complete_all(claims: list[KafkaEventOutbox]) -> bool:
    """Complete every claim, or none: one fenced UPDATE per (owner, attempt count) inside a
    savepoint that is rolled back unless every claim was accepted."""
    by_token = sorted(claims, key=lambda c: (c.lease_owner or "", c.attempt_count))
    try:
        with transaction.atomic():
            done = 0
            for (owner, attempts), group in groupby(
                by_token, key=lambda c: (c.lease_owner, c.attempt_count)
            ):
                done += _complete_filter(
                    pk__in=[claim.id for claim in group], lease_owner=owner, attempt_count=attempts
                )
            if done != len(claims):
                raise _StaleClaim
    except _StaleClaim:
        return False
    return True


def _retry_from_first_failure(items: list[Outcome]) -> Settled:
    for index, (_, failure) in enumerate(items):
        if failure is not None:
            return _retry_rest(items[index:], failure)
    return Settled()


def _settle_key(items: list[Outcome]) -> Settled:
    """Complete one key's acknowledged prefix record by record; retry from its first
    failure on. A refused completion leaves the rest of the key alone (leases lapse)."""
    for index, (claim, failure) in enumerate(items):
        if failure is not None:
            return Settled(delivered=index) + _retry_rest(items[index:], failure)
        if not _complete(claim):
            return Settled(delivered=index, refused=len(items) - index)
    return Settled(delivered=len(items))


def _fenced(claim: KafkaEventOutbox) -> Any:
    """The claim's compare-and-set filter: undelivered, same owner and attempt, live lease."""
    return KafkaEventOutbox.objects.filter(
        pk=claim.id,
        delivered_at__isnull=True,
        lease_owner=claim.lease_owner,
        attempt_count=claim.attempt_count,
        lease_expires_at__gt=Now(),
    )


def _complete(claim: KafkaEventOutbox) -> bool:
    """Mark one claimed record delivered (seed `completeKafkaEventOutbox`)."""
    return bool(
        _complete_filter(
            pk=claim.id, lease_owner=claim.lease_owner, attempt_count=claim.attempt_count
        )
    )


def _complete_filter(**fence: Any) -> int:
    """Mark delivered the undelivered records matching `fence` whose lease is live."""
    return KafkaEventOutbox.objects.filter(
        delivered_at__isnull=True, lease_expires_at__gt=Now(), **fence
    ).update(
        delivered_at=Now(),
        lease_owner=None,
        lease_expires_at=None,
        last_error=None,
        updated_at=Now(),
    )


def _retry_rest(items: list[Outcome], failure: DeliveryFailure) -> Settled:
    """Send a failed record and every later one of its key back to retry, with one backoff
    (seed `retryKafkaEventOutbox`); a later record without its own failure is recorded as
    blocked by the first."""
    head = items[0][0]
    next_attempt_at = Now() + timedelta(milliseconds=backoff_ms(head.attempt_count))
    retried = 0
    for claim, own in items:
        error = (own or failure).as_json() | {"attempt": claim.attempt_count}
        if own is None:
            error |= {"code": "_BLOCKED", "blocked_by": head.id, "cause": failure.code}
        error["at"] = timezone.now().isoformat()
        retried += _fenced(claim).update(
            lease_owner=None,
            lease_expires_at=None,
            next_attempt_at=next_attempt_at,
            last_error=redact_json(error),
            updated_at=Now(),
        )
    return Settled(retried=retried, refused=len(items) - retried)


def backoff_ms(attempt_count: int) -> int:
    """Doubling from the base with each attempt, capped, with jitter in [half, full]."""
    base = int(settings.AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS)
    cap = int(settings.AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS)
    ceiling = min(cap, base * 2 ** min(max(attempt_count - 1, 0), 30))
    return int(ceiling * random.uniform(0.5, 1.0))
