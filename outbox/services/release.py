"""Releasing an outbox record for immediate retry: the operator's "send it now" (the admin
action) and the doctor's repair of a record a dead relay worker left leased.

A record waits either in backoff (`next_attempt_at` ahead, after a failed produce) or under
a lease that lapsed with its worker. Releasing record R makes R *and every undelivered
record of its (topic, key) before it* due now and unleased: the relay claims only the due
prefix of a key, so R alone would still wait behind the records ahead of it. Attempt
counts and the last error are kept: they are the record's history.

One compare-and-set `UPDATE`, no row lock (house rule 9). It matches undelivered rows with
no lease or a lapsed one, on the database clock like every relay comparison, so a record
under a live lease is left to its worker (it may be producing it right now), and a claim
racing the release either commits first (the `UPDATE` re-checks the row and skips it) or
claims the released row after. Delivered records never change.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now

from agentrun import conf
from agentrun.errors import not_found
from outbox.models import KafkaEventOutbox
from outbox.record import wake_relay


@dataclass(frozen=True)
class Released:
    """What `release_outbox_record` did: how many records of the key it made due now, or
    (`released == 0`) why it changed nothing."""

    record_id: str
    released: int
    reason: str


def release_outbox_record(*, record_id: str) -> Released:
    """Make an undelivered record, and the undelivered records of its key before it, due
    now with no lease.

    Locks: none (a compare-and-set on each row's lease). Side effect after commit: the
    relay is woken (when on-commit wake-ups are on). Idempotent: a second call releases
    nothing. Errors: 404 for an unknown record.
    """
    record = KafkaEventOutbox.objects.filter(pk=record_id).first()
    if record is None:
        raise not_found("outbox record", record_id)
    if record.delivered_at is not None:
        return Released(record_id, 0, "it was delivered already")
    unleased = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now())
    waiting = Q(next_attempt_at__gt=Now()) | Q(lease_owner__isnull=False)
    with transaction.atomic(durable=True):
        released = KafkaEventOutbox.objects.filter(
            unleased,
            waiting,
            topic=record.topic,
            partition_key=record.partition_key,
            outbox_seq__lte=record.outbox_seq,
            delivered_at__isnull=True,
        ).update(lease_owner=None, lease_expires_at=None, next_attempt_at=Now(), updated_at=Now())
        if released and conf.outbox_wake_on_commit():
            transaction.on_commit(wake_relay)
    return Released(record_id, released, "due now" if released else _why_not(record_id))


def _why_not(record_id: str) -> str:
    """Why a release changed nothing: a live lease, or the record is already due."""
    live = KafkaEventOutbox.objects.filter(
        pk=record_id, delivered_at__isnull=True, lease_expires_at__gt=Now()
    ).exists()
    if live:
        return "a relay worker holds its lease right now"
    return "it is already due: the next relay batch sends it"
