"""The scheduler, one worker at a time: what it starts, what it leaves, what it fails;
the Celery task and `manage.py schedule_queue` run the same pass."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from pytest_django.fixtures import Settings as SettingsWrapper

from queues.models import QueueTask
from queues.services.scheduler import concurrency_limits
from queues.tasks import schedule_batch_task
from runs.models import Run
from sessions.services.lifecycle import SessionFields, upsert_session
from tests.queues.helpers import attempts, file_task, finish, run_of, schedule, task
from tests.sessions.helpers import admit

pytestmark = pytest.mark.django_db


def test_a_task_that_cannot_become_a_run_fails_with_a_failed_attempt() -> None:
    upsert_session(
        session_id="s-other",
        tenant_id="tenant-a",
        fields=SessionFields(project_id="another-project", backend_profile="scripted"),
    )
    doomed = file_task(session_ref={"session_id": "s-other"})
    fine = file_task(title="fine")
    result = schedule()
    assert (result.started, result.failed) == ([fine.id], 1)
    [attempt] = attempts(doomed.id)
    assert (task(doomed.id).state, attempt.state, attempt.run_id) == ("failed", "failed", None)
    assert "belongs to another project_id" in (attempt.failure_message or "")
    assert task(doomed.id).latest_attempt["state"] == "failed"
    assert not Run.objects.filter(session_ref__session_id="s-other").exists()


def test_a_task_naming_a_busy_session_waits_and_others_go_ahead() -> None:
    admit("s-busy", "a turn in progress")
    waiting = file_task(session_ref={"session_id": "s-busy"}, priority=9)
    other = file_task(priority=1)
    assert schedule().started == [other.id]
    assert task(waiting.id).state == "pending"
    busy_run = Run.objects.get(session_ref__session_id="s-busy")
    finish(busy_run)
    assert schedule().started == [waiting.id]
    assert run_of(waiting.id).session_id == "s-busy"


def test_the_celery_task_and_the_command_run_one_pass_and_report_counts(
    settings: SettingsWrapper,
) -> None:
    settings.AGENTRUN_QUEUE_BATCH_SIZE = 2
    for n in range(3):
        file_task(title=f"t{n}")
    assert schedule_batch_task() == {"started": 2, "failed": 0, "skipped": 0, "reconciled": 0}
    out = StringIO()
    call_command("schedule_queue", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"started": 1, "failed": 0, "skipped": 0, "reconciled": 0}
    out = StringIO()
    call_command("schedule_queue", stdout=out)
    assert out.getvalue().strip() == "queue: started 0, failed 0, skipped 0, reconciled 0"


def test_a_running_task_whose_run_ended_unseen_is_reconciled() -> None:
    filed = file_task()
    schedule()
    run = run_of(filed.id)
    Run.objects.filter(pk=run.id).update(trace_sink=None)  # the projector cannot find it
    finish(Run.objects.get(pk=run.id), status="failed", failure_kind="timeout")
    assert task(filed.id).state == "running"
    assert schedule_batch_task()["reconciled"] == 1
    assert (task(filed.id).state, attempts(filed.id)[0].failure_kind) == ("failed", "timeout")


@pytest.mark.parametrize("limits", [[], {"q": -1}, {"q": "2"}, {"q": True}])
def test_a_malformed_concurrency_setting_is_refused(
    settings: SettingsWrapper, limits: object
) -> None:
    from django.core.exceptions import ImproperlyConfigured

    settings.AGENTRUN_QUEUE_CONCURRENCY = limits
    with pytest.raises(ImproperlyConfigured):
        concurrency_limits()
    assert QueueTask.objects.count() == 0
