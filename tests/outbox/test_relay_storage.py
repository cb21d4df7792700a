"""What a relay batch costs the database, pinned: its statements with a failure in it, the
indexes a settled record writes into, and claims that are HOT updates (issue 18, cell 7)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from outbox.kafka import DeliveryFailure
from outbox.locks import claim_due_records
from outbox.services.relay import claim_outbox_records, settle_outbox_records
from tests.outbox.builders import append_logs, claimed_run

pytestmark = pytest.mark.django_db(transaction=True)
TABLE = "agentrun_kafka_event_outbox"
# What the claim and the retry set; no index may cover them, so those updates can be HOT.
LEASE_COLUMNS = {"attempt_count", "lease_owner", "lease_expires_at", "next_attempt_at"}


def relayed_keys(keys: int, events: int) -> None:
    for _ in range(keys):
        append_logs(claimed_run(), events)


def settle_statements(limit: int) -> list[str]:
    """The settle's statements for a claim of `limit` whose every key fails at its second
    record: its first is completed, the rest go back to retry."""
    claims = claim_outbox_records(owner="relay-a", limit=limit, lease_ms=60_000)
    failure = DeliveryFailure("_TRANSPORT", "broker unreachable")
    seen: set[str] = set()
    outcomes: list[DeliveryFailure | None] = []
    for claim in claims:  # in outbox_seq order: each key's first claim comes first
        outcomes.append(None if claim.partition_key not in seen else failure)
        seen.add(claim.partition_key)
    with CaptureQueriesContext(connection) as captured:
        settled = settle_outbox_records(claims=claims, outcomes=outcomes)
    assert settled.delivered == len(seen) and settled.retried == len(claims) - len(seen)
    return [q["sql"].split()[0].upper() for q in captured.captured_queries]


def test_a_settle_with_failures_takes_two_statements_whatever_its_size(
    outbox_topic: str,
) -> None:
    relayed_keys(2, 3)
    small = settle_statements(6)
    relayed_keys(40, 10)
    large = settle_statements(400)
    # BEGIN, the completing UPDATE (a WITH), the retrying UPDATE, COMMIT.
    assert small == large == ["BEGIN", "WITH", "UPDATE", "COMMIT"]


def test_a_settled_record_writes_four_index_entries_and_a_claim_none() -> None:
    """Marking a record delivered is not a HOT update: its new version goes into every index
    whose predicate it meets. Those are the primary key, the event key, the run's foreign
    key and pruning's delivered index; the undelivered-only ones (the claim's key order,
    the oldest seqs) take nothing. No index covers a lease column."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_expr(i.indpred, i.indrelid),"
            " array(SELECT a.attname FROM pg_attribute a"
            "       WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey))"
            " FROM pg_index i WHERE i.indrelid = %s::regclass",
            [TABLE],
        )
        indexes = cursor.fetchall()
    settled_into = {name for name, where, _ in indexes if where != "(delivered_at IS NULL)"}
    assert settled_into == {
        f"{TABLE}_pkey",
        f"{TABLE}_event_key",
        f"{TABLE}_run_id_b0ca2a86",
        "agentrun_kobx_delivered_idx",
    }
    assert not [name for name, _, columns in indexes if LEASE_COLUMNS & set(columns)]


def test_a_claim_of_fresh_records_is_all_hot_updates(outbox_topic: str) -> None:
    """fillfactor 45 (migration 0004) leaves each record's page room for its claimed
    version, so the claim writes no index entry. Read in the claim's own transaction
    (`pg_stat_xact_user_tables` counts only it)."""
    relayed_keys(20, 10)
    with transaction.atomic():
        claims = claim_due_records(owner="relay-a", lease_ms=60_000, limit=200)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
                [TABLE],
            )
            updated, hot = cursor.fetchone()
    assert (len(claims), updated, hot) == (200, 200, 200)
