"""The Celery wiring: every task named by `TaskName` and routed to a known queue, every beat
entry a real, expiring task on its task's queue."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from agentrun.celery import app
from agentrun.celery_schedule import BEAT_SCHEDULE
from agentrun.task_queues import TASK_QUEUES, TASK_ROUTES, TaskName, TaskQueue

ROOT = Path(__file__).resolve().parents[1]


def _our_tasks() -> set[str]:
    app.loader.import_default_modules()
    return {name for name in app.tasks if not name.startswith("celery.")}


def _decorated_names() -> list[str]:
    """The `name=` of every `@shared_task(...)` in the project, as written: `TaskName.X`."""
    names = []
    for path in sorted(ROOT.glob("*/tasks.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "shared_task":
                name = next(k.value for k in node.keywords if k.arg == "name")
                names.append(ast.unparse(name))
    return names


def test_every_task_is_routed_to_a_known_queue() -> None:
    tasks = _our_tasks()
    assert tasks, "no task was discovered"
    assert tasks == set(TASK_ROUTES)
    assert {route["queue"] for route in TASK_ROUTES.values()} <= {q.value for q in TaskQueue}


def test_every_task_name_is_used_by_exactly_one_decorated_task() -> None:
    assert _our_tasks() == {name.value for name in TaskName}
    assert set(TASK_QUEUES) == set(TaskName)
    decorated = Counter(_decorated_names())
    assert decorated == Counter(f"TaskName.{name.name}" for name in TaskName)


def test_every_beat_entry_names_a_registered_task_on_its_queue_and_expires() -> None:
    tasks = _our_tasks()
    for name, entry in BEAT_SCHEDULE.items():
        assert entry["task"] in tasks, name
        assert entry["options"]["queue"] == TASK_ROUTES[entry["task"]]["queue"], name
        assert entry["options"]["expires"] >= entry["schedule"], name


def test_a_ready_worker_freezes_its_start_up_heap_out_of_full_collections() -> None:
    # In a fresh interpreter (this one's heap is left alone): the app as a worker loads it,
    # then the signal Celery sends when the worker is ready, and in a prefork child.
    script = (
        "import gc, django; django.setup()\n"
        "from celery import signals\n"
        "from agentrun.celery import app\n"
        "app.loader.import_default_modules()\n"
        "before = gc.get_freeze_count()\n"
        "signals.worker_ready.send(sender=None)\n"
        "ready = gc.get_freeze_count()\n"
        "gc.unfreeze()\n"
        "signals.worker_process_init.send(sender=None)\n"
        "print(before, ready, gc.get_freeze_count())\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "agentrun.settings"}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    before, ready, child = map(int, out.stdout.split()[-3:])
    assert before == 0 and ready > 50_000 and child > 50_000, out.stdout
