import pytest

from sessions.models import Session
from tests.builders import key_client
from tests.sessions.helpers import turn_body

pytestmark = pytest.mark.django_db


def test_a_turn_over_http_creates_the_session_run_and_command() -> None:
    api = key_client(role="client")
    response = api.post("/api/v1/sessions/s-1/turns", turn_body("write a haiku"), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["disposition"] == "created"
    session = Session.objects.get(pk="s-1")
    assert session.execution_state == "running"
    assert session.active_run_id == body["run"]["id"]
    assert session.title == "write a haiku"
    busy = api.post("/api/v1/sessions/s-1/turns", turn_body("another"), format="json")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
