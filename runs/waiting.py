"""Long-poll: wait until a run has an event after a seq, or a timeout passes.

One listener per process holds one autocommit connection that LISTENs on
`agentrun_run_change` and wakes the waiters of the run each notification names, so a
thousand waiting requests cost one extra database connection, not a thousand. A waiter
registers (which returns only once the listener is LISTENing), *then* checks whether the
event already exists, then sleeps until woken or timed out, and checks again when woken:
an append that commits between the check and the sleep still wakes it (seed
`waitForRunChange`). If the listener loses its connection, it wakes every waiter (they
re-check the database) and reconnects, so a lost notification costs a query, never an
event.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict

import psycopg
from django.db import connection

from agentrun.errors import not_ready
from agentrun.metrics import LONG_POLL_WAITERS
from runs.models import Event
from runs.services.events import RUN_CHANGE_CHANNEL

log = logging.getLogger("agentrun.runs")
RECONNECT_S = 0.5


class RunChangeListener:
    """The process's LISTEN connection and the waiters it wakes, by run id."""

    def __init__(self, connect_params: dict[str, object]) -> None:
        self._params = connect_params
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = defaultdict(set)
        self._listening = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-change-listener", daemon=True)
        self._thread.start()

    def register(self, run_id: str, *, timeout_s: float) -> threading.Event:
        """A wake-up event for `run_id`; returns once notifications are being received."""
        woken = threading.Event()
        with self._lock:
            self._waiters[run_id].add(woken)
        if not self._listening.wait(timeout_s):
            self.unregister(run_id, woken)
            raise TimeoutError("the run-change listener could not LISTEN in time")
        return woken

    def unregister(self, run_id: str, woken: threading.Event) -> None:
        with self._lock:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(woken)
                if not waiters:
                    del self._waiters[run_id]

    def _wake(self, run_id: str | None) -> None:
        """Wake the waiters of one run, or of every run (None) after a reconnect."""
        with self._lock:
            groups = [self._waiters.get(run_id, set())] if run_id else self._waiters.values()
            for woken in [w for group in groups for w in group]:
                woken.set()

    def stop(self) -> None:
        """Close the connection and end the thread (tests; a process's exit does it too)."""
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._listen()
            except psycopg.Error as error:
                log.warning("run-change listener lost its connection: %s", error)
            self._listening.clear()
            self._wake(None)
            self._stopped.wait(RECONNECT_S)

    def _listen(self) -> None:
        with psycopg.connect(**self._params, autocommit=True) as listener:  # type: ignore[arg-type]
            listener.execute(f"LISTEN {RUN_CHANGE_CHANNEL}")
            self._listening.set()
            self._wake(None)  # anything missed while (re)connecting: re-check
            while not self._stopped.is_set():
                for notice in listener.notifies(timeout=1.0):
                    self._wake(notice.payload)


_listener: tuple[int, RunChangeListener] | None = None
_listener_lock = threading.Lock()


def run_change_listener() -> RunChangeListener:
    """This process's listener, started on first use (and again in a forked child)."""
    global _listener
    with _listener_lock:
        if _listener is None or _listener[0] != os.getpid():
            params = connection.get_connection_params()
            for key in ("cursor_factory", "context", "prepare_threshold"):
                params.pop(key, None)
            _listener = (os.getpid(), RunChangeListener(params))
        return _listener[1]


def stop_run_change_listener() -> None:
    """Stop this process's listener, if one runs (so a test database can be dropped)."""
    global _listener
    with _listener_lock:
        if _listener is not None and _listener[0] == os.getpid():
            _listener[1].stop()
        _listener = None


def wait_for_event(*, run_id: str, after_seq: int, timeout_s: float) -> bool:
    """Return True as soon as the run has an event with seq > after_seq, False on timeout."""
    deadline = time.monotonic() + timeout_s
    listener = run_change_listener()
    with LONG_POLL_WAITERS.track_inprogress():
        try:
            woken = listener.register(run_id, timeout_s=max(timeout_s, 5.0))
        except TimeoutError as error:
            raise not_ready("the run event stream is not available; retry") from error
        try:
            while True:
                woken.clear()
                if Event.objects.filter(run_id=run_id, seq__gt=after_seq).exists():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not woken.wait(remaining):
                    return False
        finally:
            listener.unregister(run_id, woken)
