"""The relay: Kafka delivery of outbox records, in the three steps of house rule 19.

1. Claim (one short transaction, committed before any I/O): the due, unleased prefix of
   each partition key, leased to this batch's owner (`outbox.locks.claim_due_records`).
2. Produce, with no transaction open, in `outbox_seq` order, and wait for every delivery
   report (`outbox.kafka.deliver`).
3. Settle (one short transaction, two set-based statements at most): per key in
   `outbox_seq` order, complete acknowledged records, each fenced by (lease owner, attempt
   count, live lease). At the first failure, that record and every later claimed record of
   its key go back to retry with one backoff (doubling, capped, jittered) and the redacted
   error. A refused completion (the lease expired; another worker may own the record now)
   stops its key: a later record is never marked delivered before an earlier one.

The guarantee is at-least-once, in order per key: a record whose outcome is unknown is sent
again, and consumers dedupe by event id. Batches are safe on any number of workers at once.
One gap remains, which librdkafka documents for idempotent producers: if a broker comes
back while a batch's messages are timing out, a later message of a key can be acknowledged
after an earlier one timed out. Both are then sent again in order, so a consumer sees the
later event once early and once in place; its per-run `seq` header shows the gap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import groupby

from confluent_kafka import Producer
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.utils import timezone

from agentrun import conf
from agentrun.backoff import backoff_ms
from agentrun.leased_batches import BatchCounts
from agentrun.leases import lease_owner
from agentrun.metrics import count_relay
from agentrun.redaction import redact_json
from outbox.kafka import (
    DeliveryFailure,
    OutgoingMessage,
    Sending,
    deliver,
    discard_producer,
    ensure_topics,
    outbox_enabled,
    outbox_topic,
    send,
)
from outbox.locks import Completion, claim_due_records, complete_claims
from outbox.sql import ClaimedRecord, Retry, retry_claims

logger = logging.getLogger("outbox.relay")
Outcome = tuple[ClaimedRecord, DeliveryFailure | None]


@dataclass(frozen=True)
class RelayResult(BatchCounts):
    """A batch's counts (`agentrun.leased_batches.BatchCounts`), plus the records sent back
    to retry."""

    retried: int = 0


def relay_outbox_batch(*, limit: int | None = None, owner: str | None = None) -> RelayResult:
    """Relay one bounded batch (at most `AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE` records).

    Locks: the claimed rows, only inside the claim and the settle transactions. Side
    effects: Kafka produce between the two. Does nothing when the outbox is off.
    """
    if not outbox_enabled():
        return RelayResult()
    ensure_topics({outbox_topic()})
    claims = _claim(limit=limit, owner=owner)
    if not claims:
        return RelayResult()
    outcomes = deliver([message_of(claim) for claim in claims])
    return _settled(claims, outcomes)


def _claim(*, limit: int | None = None, owner: str | None = None) -> list[ClaimedRecord]:
    return claim_outbox_records(
        owner=owner or lease_owner("relay"),
        limit=limit or conf.outbox_batch_size(),
        lease_ms=conf.outbox_lease_ms(),
    )


def _settled(claims: list[ClaimedRecord], outcomes: list[DeliveryFailure | None]) -> RelayResult:
    settled = settle_outbox_records(claims=claims, outcomes=outcomes)
    result = RelayResult(
        claimed=len(claims),
        delivered=settled.delivered,
        refused=settled.refused,
        retried=settled.retried,
    )
    count_relay(result.as_dict())  # the settle has committed
    return result


def run_relay_loop(
    *, stop: threading.Event, idle_seconds: float = 1.0, limit: int | None = None
) -> RelayResult:
    """Relay batch after batch until `stop` is set (`relay_outbox --loop`).

    Two batches deep: while one batch's delivery reports come in and it is settled, on a
    second thread with its own database connection, the next batch is claimed and
    produced. That keeps per-key order: a claim never takes a key whose head is leased, so
    the next batch holds other keys than the one in flight, or the next records of a key
    whose earlier ones were settled first. Sleeps only when a claim found nothing and no
    batch was in flight; setting `stop` lets the batches under way finish and ends the
    loop. A lost database connection is logged and retried after the idle sleep (records a
    failed batch had claimed come back when their lease lapses). Returns the totals.
    """
    totals = RelayResult()
    settler = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox-settle")
    in_flight: Future[_Settling] | None = None
    try:
        while not stop.is_set():
            batch = _claim_and_send(limit)
            was_busy = in_flight is not None
            totals += _finish(in_flight)
            in_flight = settler.submit(_await_and_settle, *batch) if batch else None
            if batch is None and not was_busy:
                stop.wait(idle_seconds)
        totals += _finish(in_flight)
    finally:
        settler.submit(_close_connection).result()
        settler.shutdown()
        discard_producer()  # nothing is in flight between batches; free the connections
    return totals


_Settling = tuple[RelayResult, Producer | None]  # and the producer to drop after a failure


def _claim_and_send(limit: int | None) -> tuple[list[ClaimedRecord], Sending] | None:
    """Claim a batch and queue its messages (their reports come later); None when nothing
    was claimed, or the claim failed on the database."""
    if not outbox_enabled():
        return None
    ensure_topics({outbox_topic()})
    try:
        claims = _claim(limit=limit)
    except (OperationalError, InterfaceError) as error:
        logger.warning("outbox relay claim failed on the database: %s", error)
        close_old_connections()
        return None
    return (claims, send([message_of(claim) for claim in claims])) if claims else None


def _await_and_settle(claims: list[ClaimedRecord], sending: Sending) -> _Settling:
    """On the settle thread: wait for the batch's reports, then settle it."""
    outcomes = sending.wait()
    failed = sending.producer if any(o is not None for o in outcomes) else None
    try:
        return _settled(claims, outcomes), failed
    except (OperationalError, InterfaceError) as error:
        logger.warning("outbox relay settle failed on the database: %s", error)
        close_old_connections()
        return RelayResult(claimed=len(claims)), failed


def _finish(in_flight: Future[_Settling] | None) -> RelayResult:
    """The settled batch's counts; a producer that failed is dropped (on this thread,
    which owns it) so the next batch starts on a fresh producer id."""
    if in_flight is None:
        return RelayResult()
    result, failed = in_flight.result()
    if failed is not None:
        discard_producer(only=failed)
    return result


def _close_connection() -> None:
    """Close this thread's database connection (the settle thread's, at the end)."""
    connection.close()


def claim_outbox_records(*, owner: str, limit: int, lease_ms: int) -> list[ClaimedRecord]:
    """Step 1: lease the due prefix of each key to `owner`, committed before returning.

    Locks: `FOR UPDATE SKIP LOCKED` on the claimed rows until this transaction commits.
    """
    with transaction.atomic(durable=True):
        return claim_due_records(owner=owner, lease_ms=lease_ms, limit=limit)


def message_of(record: ClaimedRecord) -> OutgoingMessage:
    """The Kafka message of a claim. Its value is the stored envelope as PostgreSQL prints
    jsonb (UTF-8, `", "` and `": "` separators): no decode and re-encode per record, and
    numbers keep the exact digits they were stored with. Headers go as stored (string
    values, sent as UTF-8; a value of another type fails that message, see `_produce`)."""
    return OutgoingMessage(
        record.topic, record.partition_key, record.value.encode(), record.headers
    )


@dataclass(frozen=True)
class Settled:
    delivered: int = 0
    retried: int = 0
    refused: int = 0


def settle_outbox_records(
    *, claims: list[ClaimedRecord], outcomes: list[DeliveryFailure | None]
) -> Settled:
    """Step 3: record each claim's outcome; `outcomes[i]` is None when Kafka acked it.

    One transaction of at most two statements, whatever the batch size: every key's
    acknowledged prefix is completed in one fenced `UPDATE`, then, for each key whose
    prefix was completed whole, the first failure and every later claim of the key go back
    to retry in a second one. Every row is a compare-and-set on its own claim, so a stale
    claim (an expired lease, a record another worker reclaimed, a dead worker's late
    report) changes nothing and is counted as refused; a refusal stops its key (the later
    claims of the key are neither completed nor retried: their lease lapses).

    Locks: the live claimed rows, until commit (`outbox.locks.complete_claims`).
    """
    keys = list(_by_key(list(zip(claims, outcomes, strict=True))))
    completions = [
        Completion(claim, key_no, offset)
        for key_no, items in enumerate(keys)
        for offset, claim in enumerate(_acked_prefix(items), start=1)
    ]
    with transaction.atomic(durable=True):
        completed = complete_claims(completions)
        retried = retry_claims([r for items in keys for r in _retries_of(items, completed)])
    settled = Settled(
        delivered=len(completed),
        retried=len(retried),
        refused=len(claims) - len(completed) - len(retried),
    )
    if settled.retried or settled.refused:
        logger.warning("outbox relay batch settled with problems: %s", settled)
    return settled


def _by_key(outcomes: list[Outcome]) -> Iterator[list[Outcome]]:
    """The outcomes grouped by (topic, partition key), each group in `outbox_seq` order."""
    ordered = sorted(outcomes, key=lambda o: (o[0].topic, o[0].partition_key, o[0].outbox_seq))
    for _, items in groupby(ordered, key=lambda o: (o[0].topic, o[0].partition_key)):
        yield list(items)


def _acked_prefix(items: list[Outcome]) -> list[ClaimedRecord]:
    """A key's claims up to (not including) its first failure."""
    prefix = []
    for claim, failure in items:
        if failure is not None:
            break
        prefix.append(claim)
    return prefix


def _retries_of(items: list[Outcome], completed: set[str]) -> list[Retry]:
    """A key's claims from its first failure on, when every claim before it was completed
    (seed `retryKafkaEventOutbox`): one backoff for the key, from its failed head's
    attempt; a later claim without its own failure is recorded as blocked by the head."""
    first = next((i for i, (_, failure) in enumerate(items) if failure is not None), None)
    if first is None or any(claim.id not in completed for claim, _ in items[:first]):
        return []
    head, failure = items[first]
    assert failure is not None
    delay = backoff_ms(
        head.attempt_count,
        base_ms=conf.outbox_backoff_base_ms(),
        cap_ms=conf.outbox_backoff_cap_ms(),
    )
    at = timezone.now().isoformat()
    retries = []
    for claim, own in items[first:]:
        error = (own or failure).as_json() | {"attempt": claim.attempt_count}
        if own is None:
            error |= {"code": "_BLOCKED", "blocked_by": head.id, "cause": failure.code}
        retries.append(Retry(claim, delay, redact_json(error | {"at": at})))
    return retries
