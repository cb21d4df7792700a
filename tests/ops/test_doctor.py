"""The doctor: every kind of impossible state, made by SQL behind the services' backs, is
reported; `--fix` repairs each through the services; a second run finds nothing."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from dispatch.models import RunnerDispatchIntent
from ops.tasks import doctor_report
from outbox.models import KafkaEventOutbox
from queues.models import QueueAttempt, QueueTask
from runs.models import Lease, Run
from runs.services.cancellation import cancel_run
from sessions.models import Session
from tests.builders import make_claimed_run
from tests.dispatch.helpers import make_dispatch_command
from tests.ops.world import append_logs
from tests.queues.helpers import file_task, finish, run_of, schedule
from tests.sessions.helpers import admit
from tests.sessions.world import idle_session

pytestmark = pytest.mark.django_db


def sql(statement: str, *params: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def doctor(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("agentrun_doctor", "--json", *args, stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def corrupt_everything() -> dict[str, str]:
    """One corruption of each kind; returns kind → the object the doctor must name."""
    ended = admit("sess-doc-ended", "hi").run
    cancel_run(run_id=ended.id, reason="done")
    sql(
        "UPDATE agentrun_sessions SET active_run_id = %s, execution_state = 'running' "
        "WHERE session_id = 'sess-doc-ended'",
        ended.id,
    )
    idle_session("sess-doc-lost")
    sql(
        "UPDATE agentrun_sessions SET active_run_id = 'run_gone', execution_state = 'running' "
        "WHERE session_id = 'sess-doc-lost'"
    )
    unleased = make_claimed_run(runner_id="runner-doc")
    sql("DELETE FROM agentrun_leases WHERE run_id = %s", unleased.id)
    leftover = make_claimed_run(runner_id="runner-old")
    cancel_run(run_id=leftover.id, reason="done")
    sql(
        "INSERT INTO agentrun_leases (run_id, runner_id, lease_expires_at, lease_epoch, "
        "updated_at) VALUES (%s, 'runner-old', now() + interval '1 hour', 1, now())",
        leftover.id,
    )
    command = make_dispatch_command()
    cancel_run(run_id=command.run_id, reason="done")
    intent = RunnerDispatchIntent.objects.get(command=command)
    sql("UPDATE agentrun_runner_dispatch_intents SET state = 'retry' WHERE id = %s", intent.id)
    task = file_task()
    schedule()
    finish(run_of(task.id))
    sql("UPDATE agentrun_queue_tasks SET state = 'running' WHERE id = %s", task.id)
    sql(
        "UPDATE agentrun_queue_attempts SET state = 'running', terminal_at = NULL "
        "WHERE task_id = %s",
        task.id,
    )
    return {
        "session-active-run-terminal": "sess-doc-ended",
        "session-active-run-missing": "sess-doc-lost",
        "run-claimed-without-lease": unleased.id,
        "lease-on-terminal-run": leftover.id,
        "intent-open-on-terminal-run": intent.id,
        "task-disagrees-with-run": task.id,
        "outbox-lease-lapsed": _lapsed_outbox_record(),
    }


def _lapsed_outbox_record() -> str:
    run = make_claimed_run(runner_id="runner-op-1")
    append_logs(run, 2)
    record = KafkaEventOutbox.objects.filter(run=run).order_by("outbox_seq").first()
    assert record is not None
    sql(
        "UPDATE agentrun_kafka_event_outbox SET lease_owner = 'dead-relay', attempt_count = 1, "
        "lease_expires_at = now() - interval '1 hour' WHERE id = %s",
        record.id,
    )
    return record.id


def test_the_doctor_reports_each_kind_repairs_it_and_then_finds_nothing() -> None:
    expected = corrupt_everything()
    found = doctor()["findings"]
    assert {(f["kind"], f["object_id"]) for f in found} == set(expected.items())
    assert doctor()["repairs"] == []  # without --fix, nothing is touched
    fixed = doctor("--fix")
    assert all(repair["ok"] for repair in fixed["repairs"]), fixed["repairs"]
    assert len(fixed["repairs"]) == len(expected)
    assert_repaired(expected)
    assert doctor() == {"findings": [], "repairs": []}
    assert doctor("--fix") == {"findings": [], "repairs": []}


def assert_repaired(expected: dict[str, str]) -> None:
    ended = Session.objects.get(pk="sess-doc-ended")
    assert (ended.active_run_id, ended.execution_state, ended.terminal_status) == (
        None,
        "terminal",
        "cancelled",
    )
    lost = Session.objects.get(pk="sess-doc-lost")
    assert (lost.active_run_id, lost.execution_state, lost.failure_kind) == (
        None,
        "terminal",
        "infra-failed",
    )
    restored = Lease.objects.get(run_id=expected["run-claimed-without-lease"])
    assert restored.runner_id == "runner-doc"
    assert not Lease.objects.filter(run_id=expected["lease-on-terminal-run"]).exists()
    intent = RunnerDispatchIntent.objects.get(pk=expected["intent-open-on-terminal-run"])
    assert intent.state == "cancelled"
    task = QueueTask.objects.get(pk=expected["task-disagrees-with-run"])
    attempt = QueueAttempt.objects.get(task=task)
    assert (task.state, attempt.state) == ("completed", "completed")
    assert Run.objects.get(pk=attempt.run_id).status == "completed"
    record = KafkaEventOutbox.objects.get(pk=expected["outbox-lease-lapsed"])
    assert record.lease_owner is None and record.lease_expires_at is None


def test_the_text_report_lists_problems_and_says_when_there_are_none() -> None:
    out = io.StringIO()
    call_command("agentrun_doctor", stdout=out)
    assert out.getvalue().strip() == "no problems found"
    corrupt_everything()
    out = io.StringIO()
    call_command("agentrun_doctor", "--fix", stdout=out)
    text = out.getvalue()
    assert "lease-on-terminal-run" in text and "7 problem(s) found, 7 repaired" in text


def test_the_beat_task_only_reports(caplog: pytest.LogCaptureFixture) -> None:
    expected = corrupt_everything()
    with caplog.at_level(logging.WARNING, logger="agentrun.doctor"):
        counts = doctor_report()
    assert counts == {kind: 1 for kind in expected}
    assert sum("doctor:" in message for message in caplog.messages) == len(expected)
    assert len(doctor()["findings"]) == len(expected)  # still there: nothing was repaired


def test_a_task_marked_running_behind_a_finished_attempt_follows_its_attempt() -> None:
    task = file_task()
    schedule()
    finish(run_of(task.id), status="failed", failure_kind="backend-failed")
    sql("UPDATE agentrun_queue_tasks SET state = 'running' WHERE id = %s", task.id)
    assert [f["object_id"] for f in doctor()["findings"]] == [task.id]
    doctor("--fix")
    assert QueueTask.objects.get(pk=task.id).state == "failed"
    assert doctor()["findings"] == []


def test_a_claim_with_no_runner_and_no_lease_fails_its_run() -> None:
    run = make_claimed_run()
    sql("DELETE FROM agentrun_leases WHERE run_id = %s", run.id)
    sql("UPDATE agentrun_runs SET claimed_by = NULL WHERE id = %s", run.id)
    [repair] = doctor("--fix")["repairs"]
    assert repair["kind"] == "run-claimed-without-lease" and repair["ok"]
    failed = Run.objects.get(pk=run.id)
    assert (failed.status, failed.failure_kind) == ("failed", "infra-failed")
    assert doctor()["findings"] == []
