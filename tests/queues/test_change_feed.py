"""The task change feed: `GET /queue/tasks?changed_after=N` walked while writers file,
start and cancel tasks returns every change exactly once, in version order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction
from rest_framework.test import APIClient

from agentrun.errors import AgentRunError
from agentrun.tenancy import Scope
from queues.models import QueueTask
from queues.services.scheduler import schedule_batch
from queues.services.tasks import cancel_task, create_task_locked, mark_task_read
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.queues.helpers import API, file_task, task_spec
from tests.runs.threads import race

WRITERS = 4
STEPS = 25


class FeedReader:
    """Walks the feed page by page, remembering every (task, version) it was given."""

    def __init__(self, api: APIClient, *, limit: int = 7) -> None:
        self.api, self.limit = api, limit
        self.cursor = 0
        self.seen: list[tuple[str, int]] = []
        self.walks = 0

    def walk(self) -> None:
        while True:
            response = self.api.get(
                f"{API}/queue/tasks?changed_after={self.cursor}&limit={self.limit}"
            )
            assert response.status_code == 200, response.json()
            page = response.json()
            versions = [item["version"] for item in page["items"]]
            assert versions == sorted(versions) and all(v > self.cursor for v in versions)
            self.seen += [(item["id"], item["version"]) for item in page["items"]]
            if not page["items"]:
                assert page["next_changed_after"] == self.cursor
                break
            self.cursor = page["next_changed_after"]
            assert self.cursor == versions[-1]
        self.walks += 1
        self.assert_nothing_skipped()

    def assert_nothing_skipped(self) -> None:
        """Every version up to the cursor had committed when the feed was read (it settles
        first), so a task still at a version the cursor has passed must have been seen."""
        seen = set(self.seen)
        passed = QueueTask.objects.filter(version__lte=self.cursor).values_list("id", "version")
        skipped = [change for change in passed if change not in seen]
        assert not skipped, f"the feed skipped {skipped} (cursor {self.cursor})"


def _slow_create(writer: int, step: int) -> None:
    """File a task, then hold the transaction open a moment: a later version commits first."""
    with transaction.atomic():
        create_task_locked(tenant_id="tenant-a", spec=task_spec(title=f"slow {writer}.{step}"))
        time.sleep(0.01)


def _change(writer: int, step: int) -> None:
    kind = step % 4
    if kind == 0:
        file_task(title=f"task {writer}.{step}", priority=step % 5)
    elif kind == 1:
        _slow_create(writer, step)
    elif kind == 2:
        schedule_batch(limit=2)
    else:
        pending = QueueTask.objects.filter(state__in=["pending", "running"]).order_by("?").first()
        if pending is not None:
            cancel_task(
                task_id=pending.id, scope=Scope.tenant("tenant-a"), reason=f"writer {writer}"
            )
            mark_task_read(
                task_id=pending.id, scope=Scope.tenant("tenant-a"), reader_id=f"r-{writer}"
            )


def _writer(writer: int) -> Callable[[], int]:
    def work() -> int:
        applied = 0
        for step in range(STEPS):
            try:
                _change(writer, step)
                applied += 1
            except AgentRunError:
                pass  # a task another writer changed meanwhile: not a feed change
        return applied

    return work


@pytest.mark.django_db(transaction=True)
def test_the_feed_walked_while_writers_change_tasks_returns_every_change_once() -> None:
    reader = FeedReader(key_client(role="client"))
    results: list[Any] = []
    writers = threading.Thread(
        target=lambda: results.extend(race([_writer(w) for w in range(WRITERS)]))
    )
    writers.start()
    while writers.is_alive():
        reader.walk()
    writers.join()
    reader.walk()

    assert all(isinstance(applied, int) for applied in results), results
    assert sum(results) >= WRITERS * STEPS * 3 // 4, results
    assert len(reader.seen) == len(set(reader.seen)), "a change was returned twice"
    versions = [version for _, version in reader.seen]
    assert versions == sorted(versions), "the feed went backwards"
    final = dict(QueueTask.objects.values_list("id", "version"))
    assert dict(reader.seen) == final  # the newest version seen per task is its version
    assert reader.walks > 2, "the reader never overlapped the writers"
    states = set(QueueTask.objects.values_list("state", flat=True))
    assert {"pending", "running", "cancelled"} <= states, states


@pytest.mark.django_db
def test_the_feed_pages_by_version_and_keeps_its_cursor_past_the_newest_change() -> None:
    first = file_task(title="a")
    second = file_task(title="b", priority=9)
    file_task(title="theirs", tenant_id="tenant-b")
    api = key_client(role="client")
    page = api.get(f"{API}/queue/tasks?changed_after={first.version - 1}&limit=1").json()
    assert [i["id"] for i in page["items"]] == [first.id]  # version order, not priority
    rest = api.get(f"{API}/queue/tasks?changed_after={page['next_changed_after']}").json()
    assert [i["id"] for i in rest["items"]] == [second.id]
    end = api.get(f"{API}/queue/tasks?changed_after={rest['next_changed_after']}").json()
    assert end == {"items": [], "next_changed_after": second.version}


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5", "99999999999999999999"])
def test_a_malformed_cursor_is_a_400_naming_it(cursor: str) -> None:
    response = key_client(role="client").get(f"{API}/queue/tasks?changed_after={cursor}")
    assert error_of(response, 400)["details"]["field"] == "changed_after"
