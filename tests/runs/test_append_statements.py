"""Statements per runner append, pinned (bench cell 1 measures the same path).

A runner's batch is BEGIN, the run lock, one event statement (`runs.sql.insert_events`:
last seq, INSERT, session touch), COMMIT and, after the commit, the NOTIFY, whatever the
batch size; before issue 18 it was seven, the NOTIFY inside the transaction (where it
serialised every appender's commit). The outbox adds no statement: its key lock, sequence
values and INSERT are CTEs of the event statement (`outbox.locks.records_ctes`; it was one
statement more until issue 18's fifth round), and the webhook-delivery INSERT … SELECT
(issue 21) is made only when the event statement found an endpoint that could match
(`tests/runs/test_append_webhook_check.py`).
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Event, Run
from runs.services.event_log import NewEvent, append_runner_events
from runs.services.lifecycle import claim_run
from sessions.models import Session
from tests.builders import make_run

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(session_id: str | None) -> Run:
    ref = {"session_id": session_id, "metadata": {}} if session_id else None
    run = make_run(session_ref=ref)
    return claim_run(run_id=run.id, runner_id="runner-1", lease_ms=60_000)


def append(run: Run, count: int) -> list[str]:
    events = [NewEvent("log", {"stream": "stdout", "message": f"line {n}"}) for n in range(count)]
    with CaptureQueriesContext(connection) as captured:
        append_runner_events(
            run_id=run.id, runner_id="runner-1", lease_epoch=run.lease_epoch, events=events
        )
    return [query["sql"] for query in captured.captured_queries]


@pytest.mark.parametrize("count", [1, 100])
@pytest.mark.parametrize("session_id", [None, "s-append"])
def test_a_runner_append_is_four_statements_and_the_notify(
    count: int, session_id: str | None
) -> None:
    run = claimed(session_id)
    before = Event.objects.filter(run=run).count()
    sqls = append(run, count)
    assert len(sqls) == 5, sqls
    assert sqls[0] == "BEGIN" and sqls[1].endswith("FOR UPDATE") and sqls[3] == "COMMIT"
    assert sqls[2].startswith("WITH base") and "pg_notify" not in sqls[2]
    assert "pg_notify" in sqls[4] and "synchronous_commit" in sqls[4]
    seqs = list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, before + count + 1))
    if session_id:
        assert Session.objects.get(pk=session_id).last_event_seq == before + count
