"""Under WSGI (Django's test client here) a stream cannot wait: it sends what there is and
ends, and the client resumes from its last id. Bad cursors are 400 envelopes, nothing
else is streamed."""

from __future__ import annotations

import warnings

import pytest

from tests.builders import key_client
from tests.streams.world import worked_turn

pytestmark = pytest.mark.django_db


def _body(response: object) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Django warns that it consumes an async stream
        return b"".join(response).decode()  # type: ignore[call-overload]


def test_under_wsgi_a_stream_sends_what_there_is_and_ends() -> None:
    run = worked_turn("s-wsgi", "hello")
    client = key_client(role="client")
    response = client.get(f"/api/v1/runs/{run.id}/stream")
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    text = _body(response)
    assert text.startswith("retry: ")
    assert text.count("\nevent: ") + text.startswith("event: ") == text.count("id: ")
    assert "event: terminal_status" in text
    session = _body(client.get("/api/v1/sessions/s-wsgi/stream?only=output"))
    assert f"id: {run.id}:1\nevent: user_message\n" in session
    assert "event: log" not in session


def test_bad_cursors_and_parameters_are_400_envelopes() -> None:
    run = worked_turn("s-bad", "hello")
    other = worked_turn("s-other", "hello")
    client = key_client(role="client")
    for path, headers in (
        (f"/api/v1/runs/{run.id}/stream", {"HTTP_LAST_EVENT_ID": "x1"}),
        (f"/api/v1/runs/{run.id}/stream?after_seq=-1", {}),
        (f"/api/v1/runs/{run.id}/stream?nope=1", {}),
        ("/api/v1/sessions/s-bad/stream", {"HTTP_LAST_EVENT_ID": "12"}),
        ("/api/v1/sessions/s-bad/stream", {"HTTP_LAST_EVENT_ID": f"{other.id}:1"}),
        ("/api/v1/sessions/s-bad/stream?only=all", {}),
    ):
        response = client.get(path, **headers)
        assert response.status_code == 400, (path, headers)
        assert response.json()["error"]["code"] == "invalid"
    assert client.get("/api/v1/runs/run_missing/stream").status_code == 404
    assert client.get("/api/v1/sessions/nope/stream").status_code == 404
    assert (
        key_client(role="client", tenant_id="t-b").get(f"/api/v1/runs/{run.id}/stream").status_code
        == 404
    )
