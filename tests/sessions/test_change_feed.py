"""The change feed: `GET /sessions?cursor=N` walked while writers change sessions."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from agentrun.errors import AgentRunError
from agentrun.tenancy import Scope
from runs.models import Run
from sessions.models import Session
from sessions.services.lifecycle import (
    SessionFields,
    StorageFacts,
    mark_session_read,
    refresh_session_storage,
    session_storage_dir,
    upsert_session,
)
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.runs.threads import race
from tests.sessions.helpers import admit
from tests.sessions.world import API, claim, clients, finish_turn, idle_session

WRITERS = 4
CHANGES_PER_WRITER = 30
SESSIONS = [f"s-feed-{n}" for n in range(6)]


class FeedReader:
    """Walks the feed page by page, remembering every (session, version) it was given."""

    def __init__(self, api: APIClient, *, limit: int = 7) -> None:
        self.api = api
        self.limit = limit
        self.cursor = 0
        self.seen: list[tuple[str, int]] = []
        self.walks = 0

    def walk(self) -> None:
        while True:
            response = self.api.get(f"{API}/sessions?cursor={self.cursor}&limit={self.limit}")
            assert response.status_code == 200, response.json()
            page = response.json()
            versions = [item["version"] for item in page["items"]]
            assert versions == sorted(versions) and all(v > self.cursor for v in versions), page
            self.seen += [(item["session_id"], item["version"]) for item in page["items"]]
            if not page["items"]:
                assert page["next_cursor"] == self.cursor
                break
            assert page["next_cursor"] == versions[-1]
            self.cursor = page["next_cursor"]
        self.walks += 1
        self.assert_nothing_skipped()

    def assert_nothing_skipped(self) -> None:
        """Every version up to the cursor is committed (the feed settled before reading),
        so a session still at a version the cursor has passed must have been returned."""
        seen = set(self.seen)
        passed = Session.objects.filter(version__lte=self.cursor).values_list("pk", "version")
        skipped = [change for change in passed if change not in seen]
        assert not skipped, f"the feed skipped {skipped} (cursor {self.cursor})"


def _change(writer: int, step: int) -> None:
    """One change of one session: a turn, a finish, a storage refresh or an upsert."""
    session_id = SESSIONS[(writer + step) % len(SESSIONS)]
    kind = (writer + step) % 4
    if kind == 0:
        admit(session_id, f"turn {writer}.{step}", when_busy="interrupt")
    elif kind == 1:
        _finish_active_turn(session_id, runner_id=f"runner-{writer}")
    elif kind == 2:
        path = f"{session_storage_dir('tenant-a', session_id)}/{step}"
        facts = StorageFacts(storage_kind="local", storage_path=path)
        refresh_session_storage(session_id=session_id, scope=Scope.tenant("tenant-a"), facts=facts)
    else:
        fields = SessionFields(
            project_id="proj-1", backend_profile="scripted", metadata={"by": writer, "step": step}
        )
        upsert_session(session_id=session_id, tenant_id="tenant-a", fields=fields)
    mark_session_read(
        session_id=session_id, scope=Scope.tenant("tenant-a"), reader_id=f"reader-{writer}"
    )


def _finish_active_turn(session_id: str, *, runner_id: str) -> None:
    current = Session.objects.get(pk=session_id)
    if current.active_run_id is None or current.active_command_id is None:
        return
    run = Run.objects.get(pk=current.active_run_id)
    finish_turn(claim(run.id, runner_id=runner_id), current.active_command_id, runner_id=runner_id)


def _writer(writer: int) -> Callable[[], int]:
    def work() -> int:
        applied = 0
        for step in range(CHANGES_PER_WRITER):
            try:
                _change(writer, step)
                applied += 1
            except AgentRunError:
                pass  # a busy session, a lease another writer took: not a feed change
        return applied

    return work


@pytest.mark.django_db(transaction=True)
def test_the_feed_walked_while_writers_change_sessions_returns_every_change_once() -> None:
    for session_id in SESSIONS:
        idle_session(session_id)
    reader = FeedReader(clients(1)[0])
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
    assert sum(results) >= WRITERS * CHANGES_PER_WRITER // 2, results
    assert len(reader.seen) == len(set(reader.seen)), "a change was returned twice"
    versions = [version for _, version in reader.seen]
    assert versions == sorted(versions), "the feed went backwards"
    final = dict(Session.objects.values_list("pk", "version"))
    last_seen = dict(reader.seen)  # later entries win: the newest version seen per session
    assert last_seen == final
    assert reader.walks > 2, "the reader never overlapped the writers"
    assert len(reader.seen) > len(SESSIONS), "no session was seen changing"


@pytest.mark.django_db
def test_a_cursor_past_the_newest_change_returns_an_empty_page_and_keeps_the_cursor() -> None:
    newest = idle_session("s-feed-end").version
    response = key_client(role="client").get(f"{API}/sessions?cursor={newest}")
    body = response.json()
    assert (body["items"], body["next_cursor"], body["count"]) == ([], newest, 0)


@pytest.mark.django_db
def test_the_feed_pages_in_version_order_and_shows_only_the_tenants_sessions() -> None:
    first = idle_session("s-feed-a").version
    idle_session("s-feed-theirs", tenant_id="tenant-b")
    second = idle_session("s-feed-b").version
    third = idle_session("s-feed-a", metadata={"again": True}).version
    api = key_client(role="client")
    page = api.get(f"{API}/sessions?cursor={first - 1}&limit=1").json()
    assert [(i["session_id"], i["version"]) for i in page["items"]] == [("s-feed-b", second)]
    assert page["next_cursor"] == second
    rest = api.get(f"{API}/sessions?cursor={page['next_cursor']}&limit=5").json()
    assert [(i["session_id"], i["version"]) for i in rest["items"]] == [("s-feed-a", third)]


@pytest.mark.django_db
@pytest.mark.parametrize("cursor", ["abc", "-1", "1.5"])
def test_a_malformed_cursor_is_a_400_naming_it(cursor: str) -> None:
    error = error_of(key_client(role="client").get(f"{API}/sessions?cursor={cursor}"), 400)
    assert error["details"]["field"] == "cursor"
