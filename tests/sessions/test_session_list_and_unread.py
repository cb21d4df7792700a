"""Read cursors: a session is unread for a reader when it changed after their last mark."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from sessions.models import SessionReadCursor
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.sessions.helpers import admit
from tests.sessions.world import API, claim, finish_turn, idle_session

pytestmark = pytest.mark.django_db


def _unread(api: APIClient, session_id: str, reader_id: str) -> bool:
    response = api.get(f"{API}/sessions/{session_id}?reader_id={reader_id}")
    assert response.status_code == 200, response.json()
    return response.json()["unread"]  # type: ignore[no-any-return]


def _mark(api: APIClient, session_id: str, reader_id: str) -> dict[str, object]:
    response = api.post(
        f"{API}/sessions/{session_id}/read", {"reader_id": reader_id}, format="json"
    )
    assert response.status_code == 200, response.json()
    return response.json()  # type: ignore[no-any-return]


def _unread_ids(api: APIClient, reader_id: str) -> list[str]:
    page = api.get(f"{API}/sessions?state=unread&reader_id={reader_id}").json()
    return sorted(item["session_id"] for item in page["items"])


def test_unread_flips_on_a_change_after_the_mark_and_back_after_marking() -> None:
    api = key_client(role="client")
    turn = admit("s-unread", "first")
    assert _unread(api, "s-unread", "alice") is True  # never read
    receipt = _mark(api, "s-unread", "alice")
    assert receipt["session_version"] == api.get(f"{API}/sessions/s-unread").json()["version"]
    assert _unread(api, "s-unread", "alice") is False
    assert _unread_ids(api, "alice") == []

    finish_turn(claim(turn.run.id), turn.command.id)  # the agent answered
    assert _unread(api, "s-unread", "alice") is True
    assert _unread_ids(api, "alice") == ["s-unread"]

    _mark(api, "s-unread", "alice")
    assert _unread(api, "s-unread", "alice") is False
    assert _unread_ids(api, "alice") == []
    assert SessionReadCursor.objects.filter(session_id="s-unread").count() == 1


def test_each_reader_has_its_own_cursor() -> None:
    api = key_client(role="client")
    idle_session("s-two-readers")
    idle_session("s-other")
    _mark(api, "s-two-readers", "alice")
    assert _unread(api, "s-two-readers", "alice") is False
    assert _unread(api, "s-two-readers", "bob") is True
    assert _unread_ids(api, "alice") == ["s-other"]
    assert _unread_ids(api, "bob") == ["s-other", "s-two-readers"]


def test_a_summary_without_a_reader_does_not_say_unread() -> None:
    api = key_client(role="client")
    idle_session("s-no-reader")
    assert api.get(f"{API}/sessions/s-no-reader").json()["unread"] is None


def test_listing_unread_without_a_reader_is_a_400_naming_it() -> None:
    error = error_of(key_client(role="client").get(f"{API}/sessions?state=unread"), 400)
    assert error["details"]["field"] == "reader_id"


def test_marking_another_tenants_session_read_is_not_found_and_writes_nothing() -> None:
    idle_session("s-theirs", tenant_id="tenant-b")
    response = key_client(role="client").post(
        f"{API}/sessions/s-theirs/read", {"reader_id": "alice"}, format="json"
    )
    assert error_of(response, 404)["code"] == "not_found"
    assert not SessionReadCursor.objects.exists()


def test_the_list_filters_by_state_and_backend() -> None:
    api = key_client(role="client")
    idle_session("s-idle")
    idle_session("s-codex", backend_profile="codex")
    admit("s-running", "go")
    done = admit("s-terminal", "go")
    finish_turn(claim(done.run.id), done.command.id)

    def ids(query: str) -> list[str]:
        response = api.get(f"{API}/sessions?{query}")
        assert response.status_code == 200, response.json()
        return sorted(item["session_id"] for item in response.json()["items"])

    assert ids("state=idle") == ["s-codex", "s-idle"]
    assert ids("state=running") == ["s-running"]
    assert ids("state=terminal") == ["s-terminal"]
    assert ids("state=all&backend_profile=codex") == ["s-codex"]
    assert ids("") == ["s-codex", "s-idle", "s-running", "s-terminal"]


def test_the_list_with_unread_is_the_key_lookup_plus_one_query(
    django_assert_num_queries: Any,
) -> None:
    for n in range(3):
        idle_session(f"s-count-{n}")
    api = key_client(role="client")
    _mark(api, "s-count-0", "alice")
    with django_assert_num_queries(2):
        response = api.get(f"{API}/sessions?state=all&reader_id=alice")
    assert [item["unread"] for item in response.json()["items"]] == [True, True, False]
