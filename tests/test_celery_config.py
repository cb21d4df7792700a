"""The Celery wiring: every task routed to a queue, every beat entry a real, expiring task."""

from __future__ import annotations

from agentrun.celery import app
from agentrun.celery_schedule import BEAT_SCHEDULE
from agentrun.task_queues import TASK_ROUTES, TaskQueue


def _our_tasks() -> set[str]:
    app.loader.import_default_modules()
    return {name for name in app.tasks if not name.startswith("celery.")}


def test_every_task_is_routed_to_a_known_queue() -> None:
    tasks = _our_tasks()
    assert tasks, "no task was discovered"
    assert tasks == set(TASK_ROUTES)
    assert {route["queue"] for route in TASK_ROUTES.values()} <= {q.value for q in TaskQueue}


def test_every_beat_entry_names_a_registered_task_and_expires() -> None:
    tasks = _our_tasks()
    for name, entry in BEAT_SCHEDULE.items():
        assert entry["task"] in tasks, name
        assert entry["options"]["expires"] >= entry["schedule"], name
