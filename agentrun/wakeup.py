"""Waking a worker after a commit, so new work is picked up in milliseconds, not at a beat.

Services register a waker's `wake` with `transaction.on_commit` (the dispatcher when an
intent commits, the relay when outbox records commit, the scheduler when a task commits
or a task's run ends). A wake-up is only an optimisation: the beat schedule picks up
anything it missed. So:
- the message is published from one background thread per process, never by the
  committing request, which must not wait for a slow or unreachable broker;
- wake-ups coalesce: while one is queued and not yet sent, another commit adds nothing,
  since the batch it triggers takes everything due; and one is sent at most every
  `COALESCE_S` per waker and process, so a burst of commits is a few messages, not one per
  commit (each was an INSERT into the database broker, and with it a third of the append's
  rate with the outbox on: bench cell 1); a task whose batch came back full runs its
  follow-ups itself for a while (`dispatch.tasks`), then queues one (`continue_burst`, not
  coalesced), so a burst keeps every batch that started it going until it is drained;
- a broker error is logged, not raised (the work is committed already); the message is
  published without retries and expires after a minute (an old wake-up is worthless).
Tasks are sent by name (`TaskName`) to the queue the route table gives them, so this module
imports no task and no service.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kombu.exceptions import OperationalError

from agentrun.celery import app
from agentrun.task_queues import TASK_QUEUES, TaskName

logger = logging.getLogger(__name__)

# The shortest gap between two coalesced wake-ups of one waker in one process: what a
# commit in a burst may wait for its wake-up at most, well under a batch's own time.
COALESCE_S = 0.01


class Waker:
    def __init__(
        self,
        *,
        task: TaskName | str,
        enabled: Callable[[], bool],
        queue: str | None = None,
        trigger: str = "commit",
    ) -> None:
        # `enabled` is a `conf` accessor, read at each wake-up so a test's override applies.
        # `trigger` is the task's argument: what woke it (a task may act on it).
        self.task, self.enabled, self.trigger = TaskName(task), enabled, trigger
        self.queue = queue or TASK_QUEUES[self.task].value  # its route, unless told
        self._lock = threading.Lock()
        self._queued = False
        self._sender: tuple[int, ThreadPoolExecutor] | None = None  # rebuilt after a fork
        self._last_sent = 0.0  # monotonic time of the last coalesced wake-up sent

    def wake(self) -> None:
        """Queue one batch of the task (see module doc). Returns at once; never raises."""
        if not self.enabled():
            return
        with self._lock:
            executor = self._executor_locked()
            if self._queued:
                return
            self._queued = True
        executor.submit(self._send, self.trigger)

    def continue_burst(self) -> None:
        """From a task whose batch came back full: queue one more batch, not coalesced.
        One follow-up per full batch keeps as many batches in flight as the burst began
        with; coalesced, two batches finishing together could leave one follow-up and the
        burst would narrow. Returns at once; never raises."""
        if not self.enabled():
            return
        with self._lock:
            executor = self._executor_locked()
        executor.submit(self._send, "continue")

    def _executor_locked(self) -> ThreadPoolExecutor:
        if self._sender is None or self._sender[0] != os.getpid():
            self._sender = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="wake"))
            self._queued = False
        return self._sender[1]

    def _send(self, trigger: str) -> None:
        if trigger != "continue":
            # Still queued while it waits: the commits meanwhile are covered by this one.
            time.sleep(max(0.0, self._last_sent + COALESCE_S - time.monotonic()))
            with self._lock:
                self._queued = False  # a commit from now on queues another wake-up after this
            self._last_sent = time.monotonic()
        try:
            app.send_task(
                self.task,
                kwargs={"trigger": trigger},
                queue=self.queue,
                expires=60,
                retry=False,
            )
        except (OperationalError, OSError) as error:
            logger.warning("%s wake-up not sent (the beat will pick it up): %s", self.task, error)
