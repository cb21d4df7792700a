"""Waking the dispatcher when an intent commits, so pickup takes milliseconds, not a beat.

`record_intent_locked` registers `wake_dispatcher` with `transaction.on_commit`: after the
command and its intent commit, one `dispatch.dispatch_batch` message goes to the dispatch
queue. The task is sent by name, so this module imports neither the task nor the
services (the runs services import the intents module, which imports this one).

A wake-up is only an optimisation: the beat schedule claims anything it missed. So:
- it is published from one background thread per process, never by the committing
  request, which must not wait for a slow or unreachable broker (the redis client alone
  retries for seconds);
- wake-ups coalesce: while one is queued and not yet sent, another commit adds nothing,
  since the batch it triggers claims every due intent up to the batch size (and the task
  wakes itself again while batches come back full);
- a broker error is logged, not raised (the command is committed already), the message is
  published without retries and expires after a minute (an old wake-up is worthless).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from kombu.exceptions import OperationalError

from agentrun.celery import app
from agentrun.task_queues import TaskQueue

logger = logging.getLogger(__name__)

DISPATCH_TASK = "dispatch.dispatch_batch"

_lock = threading.Lock()
_queued = False
_sender: tuple[int, ThreadPoolExecutor] | None = None  # (pid, executor): rebuilt after fork


def wake_dispatcher() -> None:
    """Queue one dispatch batch (see module doc). Returns at once; never raises."""
    global _queued, _sender
    if not settings.AGENTRUN_DISPATCH_WAKE_ON_COMMIT:
        return
    with _lock:
        if _sender is None or _sender[0] != os.getpid():  # first use, or a forked child
            _sender = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="dispatch-wake"))
            _queued = False
        if _queued:
            return
        _queued = True
        executor = _sender[1]
    executor.submit(_send)


def _send() -> None:
    global _queued
    with _lock:
        _queued = False  # a commit from now on queues another wake-up after this one
    try:
        app.send_task(
            DISPATCH_TASK,
            kwargs={"trigger": "commit"},
            queue=TaskQueue.DISPATCH.value,
            expires=60,
            retry=False,
        )
    except (OperationalError, OSError) as error:
        logger.warning("dispatch wake-up not sent (the beat will pick it up): %s", error)
