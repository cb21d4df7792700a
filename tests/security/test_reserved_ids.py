"""Caller-reserved ids (a run's, a session's) as a hostile client chooses them: an id the
runner's command line would read as an option, one no URL can address, one that breaks the
`<run id>:<seq>` wake-up notification (a long-poll that never wakes), and oversize, empty
or non-ASCII ids. Each is a 400 and creates nothing (SPEC §9.7)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from rest_framework.test import APIClient

from runs.models import Run
from sessions.models import Session
from tests.api.helpers import API, run_body
from tests.builders import key_client
from tests.sessions.helpers import turn_body

pytestmark = pytest.mark.django_db

HOSTILE_IDS = ["--settings=x", "a/b", "a:b", "", "a" * 201, "rün", "-a", ".a", "a b"]
# A `/` in a path is a different route, not an id: the path cases are the rest.
HOSTILE_PATH_IDS = [i for i in HOSTILE_IDS if "/" not in i and i]


def _assert_400(response: object, field: str) -> None:
    assert response.status_code == 400, response.content  # type: ignore[attr-defined]
    error = response.json()["error"]  # type: ignore[attr-defined]
    assert error["code"] == "invalid" and field in error["message"]


@pytest.fixture
def client() -> APIClient:
    return key_client(role="client")


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_a_reserved_run_id_outside_the_charset_is_a_400(client: APIClient, run_id: str) -> None:
    _assert_400(client.post(f"{API}/runs", run_body(id=run_id), format="json"), "id")
    assert not Run.objects.exists()


@pytest.mark.parametrize("session_id", HOSTILE_IDS)
def test_a_session_ref_outside_the_charset_is_a_400(client: APIClient, session_id: str) -> None:
    body = run_body(session_ref={"session_id": session_id})
    _assert_400(client.post(f"{API}/runs", body, format="json"), "session_id")
    assert not Run.objects.exists() and not Session.objects.exists()


@pytest.mark.parametrize("session_id", HOSTILE_PATH_IDS)
def test_a_session_path_id_outside_the_charset_is_a_400(client: APIClient, session_id: str) -> None:
    path = f"{API}/sessions/{quote(session_id, safe='')}"
    put = client.put(path, {"project_id": "p", "backend_profile": "scripted"}, format="json")
    _assert_400(put, "id")
    _assert_400(client.post(f"{path}/turns", turn_body(), format="json"), "id")
    assert not Session.objects.exists() and not Run.objects.exists()


@pytest.mark.parametrize("run_id", HOSTILE_IDS)
def test_a_turn_run_id_outside_the_charset_is_a_400(client: APIClient, run_id: str) -> None:
    body = turn_body()
    body["run"]["id"] = run_id
    _assert_400(client.post(f"{API}/sessions/s-1/turns", body, format="json"), "id")
    assert not Run.objects.exists() and not Session.objects.exists()


@pytest.mark.parametrize("good", ["a", "A.b_c-9", "run_01JD3K", "9" * 200])
def test_ids_in_the_charset_are_accepted(client: APIClient, good: str) -> None:
    assert client.post(f"{API}/runs", run_body(id=good), format="json").status_code == 201
    session = client.put(
        f"{API}/sessions/{good}", {"project_id": "p", "backend_profile": "scripted"}, format="json"
    )
    assert session.status_code == 200, session.content
