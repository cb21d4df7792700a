"""Long-poll: wait until a run has an event after a seq, or a timeout passes.

The waiter LISTENs on `agentrun_run_change` on its own autocommit connection, *then*
checks whether the event already exists, then waits for a notification naming the run.
Listening before checking means an append that commits between the two is never missed
(seed `waitForRunChange`). The dedicated connection keeps Django's request connection
free of LISTEN state and out of any transaction.
"""

from __future__ import annotations

import time

import psycopg
from django.db import connection

from agentrun.metrics import LONG_POLL_WAITERS
from runs.models import Event
from runs.services.events import RUN_CHANGE_CHANNEL


def _listen_connection() -> psycopg.Connection[tuple[object, ...]]:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    return psycopg.connect(**params, autocommit=True)


def wait_for_event(*, run_id: str, after_seq: int, timeout_s: float) -> bool:
    """Return True as soon as the run has an event with seq > after_seq, False on timeout."""
    deadline = time.monotonic() + timeout_s
    with LONG_POLL_WAITERS.track_inprogress(), _listen_connection() as listener:
        listener.execute(f"LISTEN {RUN_CHANGE_CHANNEL}")
        if Event.objects.filter(run_id=run_id, seq__gt=after_seq).exists():
            return True
        while (remaining := deadline - time.monotonic()) > 0:
            for notice in listener.notifies(timeout=remaining, stop_after=1):
                if notice.payload == run_id:
                    return True
    return False
