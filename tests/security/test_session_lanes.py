"""Attack: tenant B files queue tasks naming tenant A's session id (`POST /queue/tasks`
with `session_ref.session_id`), parked in a queue that never runs, to hold A's queued
turns behind its own and to learn their positions (issue 16, finding 6). A session's lane
is its tenant's tasks naming it: B's tasks neither push A's turns back nor count in their
positions, A's idle session is not made to queue, and A's queued turn is admitted when
A's session goes idle however many of B's tasks wait."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from runs.models import Run
from sessions.models import Session
from tests.builders import key_client
from tests.queues.helpers import finish, schedule, task, task_body
from tests.sessions.helpers import admit, turn_body
from tests.sessions.world import post_turn

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("parked_queue"),
]
VICTIM = "sess-a"


@pytest.fixture
def parked_queue() -> Any:
    with override_settings(AGENTRUN_QUEUE_CONCURRENCY={"parked": 0}):
        yield


def _squat(count: int = 3) -> list[str]:
    """Tenant B's tasks naming A's session, in a queue that never starts them."""
    intruder = key_client(role="client", tenant_id="tenant-b")
    body = task_body(queue="parked", session_ref={"session_id": VICTIM})
    ids = []
    for _ in range(count):
        response = intruder.post("/api/v1/queue/tasks", body, format="json")
        assert response.status_code == 201, response.json()
        ids.append(response.json()["id"])
    return ids


def _enqueue(text: str) -> dict[str, Any]:
    body = {**turn_body(text), "when_busy": "enqueue"}
    response = post_turn(key_client(role="client", tenant_id="tenant-a"), VICTIM, body)
    assert response.status_code in (201, 202), response.json()
    return response.json()  # type: ignore[no-any-return]


def test_another_tenants_tasks_do_not_push_my_queued_turns_back() -> None:
    admit(VICTIM, "first", tenant_id="tenant-a")
    squatters = _squat()
    queued = _enqueue("second")
    assert (queued["disposition"], queued["position"]) == ("queued", 1)
    assert _enqueue("third")["position"] == 2

    finish(Run.objects.get(pk=Session.objects.get(pk=VICTIM).active_run_id))
    assert schedule().started == [queued["task_id"]]
    assert {task(t).state for t in squatters} == {"pending"}  # still parked, held nothing


def test_another_tenants_tasks_do_not_make_my_idle_session_queue() -> None:
    admit(VICTIM, "first", tenant_id="tenant-a")
    finish(Run.objects.get(pk=Session.objects.get(pk=VICTIM).active_run_id))
    _squat()
    answer = _enqueue("runs at once")
    assert answer["disposition"] != "queued", answer
    assert answer["run"] is not None
