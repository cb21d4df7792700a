"""Waking the scheduler when a task commits or a task's run ends, so a queued task starts
in milliseconds rather than at the next beat.

Services register `wake_scheduler` with `transaction.on_commit`. The task is sent by name,
so this module imports neither the task nor the services (the runs services import the
projector, which imports this module). A wake-up is only an optimisation: the beat entry
starts anything it missed, so a broker error is logged, not raised, the message is sent
without retries and expires after a minute.
"""

from __future__ import annotations

import logging

from django.conf import settings
from kombu.exceptions import OperationalError

from agentrun.celery import app
from agentrun.task_queues import TaskQueue

logger = logging.getLogger(__name__)

SCHEDULE_TASK = "queue.schedule_batch"


def wake_scheduler() -> None:
    """Enqueue one scheduler batch now (see module doc). Never raises for broker errors."""
    if not settings.AGENTRUN_QUEUE_WAKE_ON_COMMIT:
        return
    try:
        app.send_task(
            SCHEDULE_TASK,
            kwargs={"trigger": "commit"},
            queue=TaskQueue.QUEUE.value,
            expires=60,
            retry=False,
        )
    except (OperationalError, OSError) as error:
        logger.warning("queue wake-up not sent (the beat will pick it up): %s", error)
