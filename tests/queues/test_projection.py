"""The projector: a task's run ending (completed, failed, blocked, cancelled) moves the
attempt that ran it and the task, in the run's own transaction."""

from __future__ import annotations

import pytest

from queues.models import QueueTask
from runs.services.cancellation import cancel_command, cancel_run
from tests.queues.helpers import attempts, file_task, finish, run_of, schedule, task

pytestmark = pytest.mark.django_db


def _started_task(**overrides: object) -> QueueTask:
    filed = file_task(**overrides)
    assert schedule().started == [filed.id]
    return task(filed.id)


def test_a_started_task_has_a_running_attempt_zero_and_a_run_that_names_it() -> None:
    started = _started_task(lane="nightly")
    [attempt] = attempts(started.id)
    run = run_of(started.id)
    assert (started.state, attempt.retry_index, attempt.state) == ("running", 0, "running")
    assert run.trace_sink == {"task_id": started.id, "lane": "nightly"}
    assert started.latest_attempt["attempt_id"] == attempt.attempt_id
    assert started.latest_attempt["run_id"] == attempt.run_id == run.id
    assert attempt.command_id == run.commands.get().id and attempt.activated_at is not None


def test_the_run_completing_completes_the_attempt_and_the_task() -> None:
    started = _started_task()
    finish(run_of(started.id))
    done, [attempt] = task(started.id), attempts(started.id)
    assert (done.state, attempt.state, attempt.failure_kind) == ("completed", "completed", None)
    assert attempt.terminal_at is not None
    assert done.latest_attempt["state"] == "completed" and done.version > started.version


@pytest.mark.parametrize("status", ["failed", "blocked"])
def test_the_run_failing_or_blocking_moves_attempt_and_task_with_the_failure(status: str) -> None:
    started = _started_task()
    finish(run_of(started.id), status=status, failure_kind="backend-failed", failure_message="boom")
    done, [attempt] = task(started.id), attempts(started.id)
    assert (done.state, attempt.state) == (status, status)
    assert (attempt.failure_kind, attempt.failure_message) == ("backend-failed", "boom")
    assert done.latest_attempt["failure_kind"] == "backend-failed"


def test_the_run_being_cancelled_cancels_attempt_and_task_with_the_reason() -> None:
    started = _started_task()
    cancel_run(run_id=run_of(started.id).id, reason="operator stopped it")
    done, [attempt] = task(started.id), attempts(started.id)
    assert (done.state, attempt.state, attempt.failure_kind) == (
        "cancelled",
        "cancelled",
        "cancelled",
    )
    assert done.cancel_reason == "operator stopped it" and done.cancelled_at is not None


def test_cancelling_the_turn_alone_cancels_the_attempt_and_a_late_finish_changes_nothing() -> None:
    started = _started_task()
    run = run_of(started.id)
    cancel_command(command_id=task(started.id).latest_attempt["command_id"], reason="not needed")
    assert (task(started.id).state, attempts(started.id)[0].state) == ("cancelled", "cancelled")
    cancelled_version = task(started.id).version

    finish(run, status="failed", failure_kind="backend-failed")  # the run ends later

    [attempt] = attempts(started.id)
    assert (attempt.state, attempt.failure_message) == ("cancelled", "not needed")  # immutable
    assert task(started.id).state == "cancelled" and task(started.id).version == cancelled_version


def test_a_run_without_a_task_projects_nothing() -> None:
    from tests.builders import make_run

    before = list(QueueTask.objects.values_list("id", "version"))
    cancel_run(run_id=make_run().id, reason="plain run")
    assert list(QueueTask.objects.values_list("id", "version")) == before
