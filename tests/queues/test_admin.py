"""The queue admin: tasks searchable by id, filterable by state, read-only; the attempt
history on the task's page (attempts and cursors have composite keys admin cannot show)."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client

from queues.models import QueueAttempt, QueueReadCursor, QueueTask
from tests.queues.helpers import file_task, finish, run_of, schedule

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/queues/queuetask/"


def test_the_changelist_searches_by_id_and_filters_by_state(admin_client: Client) -> None:
    waiting = file_task(title="waiting task")
    started = file_task(title="started task", priority=5)
    schedule(limit=1)
    listed = admin_client.get(CHANGELIST)
    assert listed.status_code == 200 and b"waiting task" in listed.content
    by_id = admin_client.get(CHANGELIST, {"q": waiting.id})
    assert b"waiting task" in by_id.content and b"started task" not in by_id.content
    running = admin_client.get(CHANGELIST, {"state__exact": "running"})
    assert started.id.encode() in running.content and b"waiting task" not in running.content


def test_a_task_page_shows_its_attempts_and_nothing_can_be_changed(admin_client: Client) -> None:
    filed = file_task()
    schedule()
    finish(run_of(filed.id), status="failed", failure_kind="backend-failed")
    page = admin_client.get(f"{CHANGELIST}{filed.id}/change/")
    assert page.status_code == 200
    assert QueueAttempt.objects.get(task_id=filed.id).attempt_id.encode() in page.content
    assert b"backend-failed" in page.content
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    assert admin_client.post(f"{CHANGELIST}{filed.id}/delete/", {"post": "yes"}).status_code == 403
    assert QueueTask.objects.filter(pk=filed.id).exists()
    assert not admin.site.is_registered(QueueAttempt)
    assert not admin.site.is_registered(QueueReadCursor)
