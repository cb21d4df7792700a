"""`when_busy=enqueue`: a turn for a busy session is filed as a task in the session's lane,
answered `queued` with its task id and position, and admitted by the scheduler one at a
time, in order, as the session goes idle."""

from __future__ import annotations

from typing import Any

import pytest

from queues.models import QueueTask
from runs.models import Run
from sessions.models import Session
from tests.builders import key_client
from tests.queues.helpers import attempts, finish, schedule, task
from tests.runs.threads import race
from tests.sessions.helpers import admit, turn_body
from tests.sessions.world import clients, post_turn


def _enqueue(session_id: str, text: str, **command: Any) -> dict[str, Any]:
    body = {**turn_body(text, **command), "when_busy": "enqueue"}
    response = post_turn(key_client(role="client"), session_id, body)
    assert response.status_code == 202, response.json()  # accepted, not yet a run
    return response.json()  # type: ignore[no-any-return]


def _active_text(session_id: str) -> str | None:
    session = Session.objects.get(pk=session_id)
    if session.active_run_id is None:
        return None
    return Run.objects.get(pk=session.active_run_id).commands.get(type="turn").payload["text"]


def _finish_active(session_id: str) -> None:
    finish(Run.objects.get(pk=Session.objects.get(pk=session_id).active_run_id))


@pytest.mark.django_db
def test_enqueued_turns_are_queued_then_admitted_one_at_a_time_in_order() -> None:
    admit("s-q", "first")
    second = _enqueue("s-q", "second", idempotency_key="k-2")
    third = _enqueue("s-q", "third")
    assert (second["disposition"], second["position"], second["run"], second["command"]) == (
        "queued",
        1,
        None,
        None,
    )
    assert (third["disposition"], third["position"]) == ("queued", 2)
    queued = task(second["task_id"])
    assert (queued.lane, queued.queue, queued.state) == ("session:s-q", "session-turns", "pending")

    assert schedule().started == []  # the session is busy: nothing is claimed
    _finish_active("s-q")
    assert schedule().started == [second["task_id"]]  # the oldest, and only it
    assert _active_text("s-q") == "second" and task(third["task_id"]).state == "pending"
    assert schedule().started == []

    _finish_active("s-q")
    assert task(second["task_id"]).state == "completed"
    assert schedule().started == [third["task_id"]] and _active_text("s-q") == "third"
    [attempt] = attempts(second["task_id"])
    assert (attempt.state, attempt.session_id) == ("completed", "s-q")


@pytest.mark.django_db
def test_the_admitted_turn_keeps_the_clients_key_so_a_retry_replays_it() -> None:
    admit("s-q-key", "first")
    queued = _enqueue("s-q-key", "second", idempotency_key="k-2")
    assert _enqueue("s-q-key", "second", idempotency_key="k-2")["task_id"] == queued["task_id"]
    _finish_active("s-q-key")
    schedule()
    body = {**turn_body("second", idempotency_key="k-2"), "when_busy": "enqueue"}
    again = post_turn(key_client(role="client"), "s-q-key", body).json()
    run_id = task(queued["task_id"]).latest_attempt["run_id"]
    assert (again["disposition"], again["run"]["id"]) == ("replayed", run_id)
    assert Run.objects.get(pk=run_id).trace_sink is None  # as the client asked
    finish(Run.objects.get(pk=run_id))  # found through its attempt, still projected
    assert task(queued["task_id"]).state == "completed"


@pytest.mark.django_db
def test_an_idle_session_admits_at_once_unless_turns_are_already_waiting() -> None:
    response = post_turn(
        key_client(role="client"), "s-q-idle", {**turn_body("now"), "when_busy": "enqueue"}
    )
    assert response.status_code == 201 and response.json()["disposition"] == "created"
    waiting = _enqueue("s-q-idle", "later")
    _finish_active("s-q-idle")  # idle, but a turn is queued: a new one goes behind it
    behind = _enqueue("s-q-idle", "even later")
    assert (waiting["position"], behind["position"]) == (1, 2)
    assert schedule().started == [waiting["task_id"]]


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_to_one_session_get_distinct_positions() -> None:
    admit("s-q-race", "first")
    apis = clients(4)

    def enqueue(n: int) -> Any:
        body = {**turn_body(f"turn {n}"), "when_busy": "enqueue"}
        return lambda: post_turn(apis[n], "s-q-race", body).json()

    answers = race([enqueue(n) for n in range(4)])
    assert sorted(a["position"] for a in answers) == [1, 2, 3, 4], answers
    by_position = sorted(answers, key=lambda a: a["position"])
    order = list(
        QueueTask.objects.filter(lane="session:s-q-race")
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )
    assert [a["task_id"] for a in by_position] == order
