"""The write path: an outbox record per event, in the event's own transaction."""

from __future__ import annotations

import re
import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings as SettingsWrapper

from outbox.models import KafkaEventOutbox
from outbox.record import wake_relay
from runs.locks import lock_runs
from runs.models import Event
from runs.services.command_lifecycle import create_command
from runs.services.event_log import NewEvent, RunEvents, append_events_to_runs_locked
from tests.outbox.builders import append_logs, append_logs_in_open_transaction, claimed_run


@pytest.mark.django_db
def test_each_event_gets_a_record_with_a_cloudevents_envelope_and_headers(
    outbox_topic: str,
) -> None:
    run = claimed_run(tenant_id="tenant-a")
    command = create_command(run_id=run.id, type="turn", payload={"text": "hi"}).command
    event = Event.objects.filter(run=run, type="user_message").get()
    record = KafkaEventOutbox.objects.get(event_id=event.id)

    assert (record.topic, record.partition_key) == (outbox_topic, f"tenant-a:{run.id}")
    assert (record.run_id, record.source_seq, record.attempt_count) == (run.id, event.seq, 0)
    assert record.delivered_at is None and record.lease_owner is None
    value = record.value
    assert value["specversion"] == "1.0"
    assert (value["id"], value["subject"]) == (event.id, run.id)
    assert value["type"] == "agentrun.event.user_message"
    assert value["datacontenttype"] == "application/json"
    assert value["source"] and value["time"].endswith("Z")
    assert value["data"] == {
        "tenant_id": "tenant-a",
        "run_id": run.id,
        "session_id": None,
        "command_id": command.id,
        "seq": event.seq,
        "type": "user_message",
        "payload": event.payload,
    }
    assert record.headers == {
        "content-type": "application/cloudevents+json; charset=UTF-8",
        "event_id": event.id,
        "event_type": "user_message",
        "run_id": run.id,
        "seq": str(event.seq),
        "outbox_seq": str(record.outbox_seq),
    }
    # Every event of the run has its record, in seq order along the global sequence.
    records = KafkaEventOutbox.objects.filter(run=run).order_by("outbox_seq")
    assert [r.source_seq for r in records] == list(
        Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)
    )


@pytest.mark.django_db
def test_a_session_run_is_keyed_by_tenant_and_session(outbox_topic: str) -> None:
    first = claimed_run(tenant_id="tenant-b", session_id="sess-42")
    second = claimed_run(tenant_id="tenant-b", session_id="sess-42")
    append_logs(first, 2)
    append_logs(second, 2)
    keys = set(KafkaEventOutbox.objects.values_list("partition_key", flat=True))
    assert keys == {"tenant-b:sess-42"}
    record = KafkaEventOutbox.objects.filter(run=second).latest("outbox_seq")
    assert record.value["data"]["session_id"] == "sess-42"


def prepared_text(sql: str) -> str:
    """`sql`, or for the EXECUTE of a runner append's prepared statement
    (`agentrun.prepared_sql.execute_hot`) the statement it runs."""
    name = re.search(r"\bEXECUTE (\w+)", sql)
    if name is None:
        return sql
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE name = %s", [name[1]])
        return sql + "\n" + cursor.fetchone()[0]


@pytest.mark.django_db
def test_a_batch_costs_the_same_queries_as_one_event(outbox_topic: str) -> None:
    run = claimed_run()
    with CaptureQueriesContext(connection) as one:
        append_logs(run, 1)
    with CaptureQueriesContext(connection) as fifty:
        append_logs(run, 50, start=1)
    assert len(fifty) == len(one)
    statements = [prepared_text(query["sql"]) for query in fifty.captured_queries]
    # The events' own statement takes the key lock, draws the seqs and inserts the records
    # (issue 18: it was a statement of its own, and before that three).
    (record,) = [sql for sql in statements if "agentrun_kafka_event_outbox" in sql]
    assert "pg_advisory_xact_lock" in record and "nextval" in record
    assert "INSERT INTO agentrun_events" in record
    assert sum("pg_advisory_xact_lock" in sql for sql in statements) == 1
    # BEGIN, run lock, events and records, COMMIT (no webhook endpoint: no delivery
    # statement); was 5 with the records' own statement.
    assert len(statements) == 4, statements
    assert KafkaEventOutbox.objects.filter(run=run, source_seq__gt=1).count() == 51


@pytest.mark.django_db(transaction=True)
def test_an_event_appended_in_a_rolled_back_transaction_leaves_no_record(
    outbox_topic: str, settings: SettingsWrapper
) -> None:
    run = claimed_run()
    before = KafkaEventOutbox.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        appended = append_logs_in_open_transaction(run, 3)
        assert KafkaEventOutbox.objects.filter(event_id=appended[0].id).exists()
        raise RuntimeError("the caller's transaction fails after the append")
    assert KafkaEventOutbox.objects.count() == before
    assert not Event.objects.filter(pk__in=[event.id for event in appended]).exists()


@pytest.mark.django_db(transaction=True)
def test_a_transaction_registers_one_relay_wake_up_however_many_appends(
    outbox_topic: str, settings: SettingsWrapper
) -> None:
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = True
    run = claimed_run()
    with transaction.atomic():
        for start in range(3):
            append_logs_in_open_transaction(run, 2, start=start * 2)
        wakes = [cb for _, cb, _ in connection.run_on_commit if cb is wake_relay]
        assert len(wakes) == 1
        transaction.set_rollback(True)  # nothing is committed, so nothing is enqueued


@pytest.mark.django_db
def test_with_the_outbox_disabled_no_records_are_written(outbox_off: None) -> None:
    run = claimed_run()
    append_logs(run, 5)
    create_command(run_id=run.id, type="turn", payload={"text": "hi"})
    assert Event.objects.filter(run=run).count() > 5
    assert not KafkaEventOutbox.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_writers_of_one_session_key_draw_outbox_seqs_in_commit_order(outbox_topic: str) -> None:
    """The key lock: a second writer of the key draws its seq only after the first commits,
    so the relay can never deliver it before an earlier record that is not yet visible."""
    first, second = (claimed_run(session_id="sess-order") for _ in range(2))
    drawn = threading.Event()
    at: dict[str, float] = {}

    def slow_writer() -> None:
        with transaction.atomic():
            append_logs_in_open_transaction(first, 1)
            drawn.set()
            time.sleep(0.5)
            # Taken before the COMMIT, not after it: a thread may be descheduled between
            # its commit and its next line while the writer it released runs on.
            at["first_commits"] = time.monotonic()
        connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert drawn.wait(10)
    append_logs(second, 1)
    at["second_committed"] = time.monotonic()
    thread.join()

    # Without the key lock the second append would return during the first's sleep.
    assert at["second_committed"] >= at["first_commits"]
    last = {
        run.id: KafkaEventOutbox.objects.filter(run=run).latest("outbox_seq").outbox_seq
        for run in (first, second)
    }
    assert last[second.id] > last[first.id]


@pytest.mark.django_db
def test_a_batch_over_runs_of_two_keys_records_them_in_the_events_statement(
    outbox_topic: str,
) -> None:
    """`append_events_to_runs_locked` (a batch settle) over two runs of one session and a
    run of none: every key locked and recorded in the events' own statement, each
    record's seq the event's (set in the statement), each key's `outbox_seq` in order."""
    first = claimed_run(tenant_id="tenant-c", session_id="sess-c")
    second = claimed_run(tenant_id="tenant-c", session_id="sess-c")
    lone = claimed_run(tenant_id="tenant-c")
    append_logs(first, 2)  # the seqs continue after events that are there already
    with transaction.atomic():
        locked = lock_runs([lone.id, first.id, second.id])
        batches = [
            RunEvents(locked[run.id], [NewEvent("log", {"line": n}) for n in range(3)])
            for run in (lone, second, first)
        ]
        with CaptureQueriesContext(connection) as captured:
            appended = append_events_to_runs_locked(batches=batches)
    statements = [query["sql"] for query in captured.captured_queries]
    (record_sql,) = [sql for sql in statements if "agentrun_kafka_event_outbox" in sql]
    assert "INSERT INTO agentrun_events" in record_sql
    assert sum("pg_advisory_xact_lock" in sql for sql in statements) == 1
    events = [event for run_events in appended for event in run_events]
    stored = KafkaEventOutbox.objects.filter(event_id__in=[event.id for event in events])
    records = {record.event_id: record for record in stored}
    assert len(records) == len(events) == 9
    for event in events:
        record = records[event.id]
        assert record.source_seq == event.seq == record.value["data"]["seq"]
        assert record.headers["seq"] == str(event.seq)
        assert record.headers["outbox_seq"] == str(record.outbox_seq)
        assert record.run_id == event.run_id
    assert {records[e.id].partition_key for e in appended[0]} == {f"tenant-c:{lone.id}"}
    # One key for the session's two runs: the second run's records first (the batch's
    # order), each run's in seq order, so the key's outbox_seq follows that order.
    session_key = [records[e.id] for e in appended[1] + appended[2]]
    assert {r.partition_key for r in session_key} == {"tenant-c:sess-c"}
    assert [r.outbox_seq for r in session_key] == sorted(r.outbox_seq for r in session_key)
