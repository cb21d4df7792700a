"""The projector's safety net: tasks still running whose run has already ended.

A run can end without reaching `queues.projection` (a turn a client admitted with the
queued turn's key, a run terminalised before the projector existed). The scheduler pass
projects those here, one short transaction per task, run lock first (the projection
tier's lock order: run → task → attempt).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.db.models.fields.json import KT

from queues.models import QueueTask, TaskState
from queues.projection import project_outcome_locked
from runs.locks import lock_run
from runs.models import TERMINAL_RUN_STATUSES, Run


def reconcile_projections(*, limit: int) -> int:
    """Project up to `limit` running tasks whose latest run is already terminal.

    Locks per task, one transaction each: the run, then the task and attempt. Safe on many
    workers at once: a task settled by another is left as it is. Returns how many moved.
    """
    ended = Run.objects.filter(pk=OuterRef("run_id"), status__in=TERMINAL_RUN_STATUSES)
    stale = (
        QueueTask.objects.filter(state=TaskState.RUNNING)
        .annotate(run_id=KT("latest_attempt__run_id"))
        .filter(Exists(ended))
        .values_list("id", "run_id")[:limit]
    )
    moved = 0
    for task_id, run_id in list(stale):
        with transaction.atomic(durable=True):
            run = lock_run(run_id)
            moved += project_outcome_locked(
                task_id,
                run_id=run.id,
                state=run.status,
                failure_kind=run.failure_kind,
                failure_message=run.failure_message or run.cancel_reason,
            )
    return moved
