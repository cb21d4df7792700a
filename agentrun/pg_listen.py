"""A worker's wake-up by PostgreSQL: one `LISTEN` connection and a thread that drains.

A commit that makes work due (a dispatch intent) sends `NOTIFY <channel>` (a trigger of
the table, so no service pays a statement for it); PostgreSQL delivers it at commit, to
every listening worker. The listener thread then calls `drain` in-process, which claims
and works batches until one comes back short, so the broker is not on the pickup path.
Claims are `SKIP LOCKED`, so several listening workers (and the Celery tasks of workers
that do not listen) share a burst without waiting for each other. A notification is only
an optimisation, like the on-commit Celery wake-up: one lost while the connection was
down is made up for by a drain after every (re)connection, and the beat stays the safety
net. `drain` runs on this thread's own Django connection, closed when it is unusable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from django.db import close_old_connections, connection

log = logging.getLogger("agentrun.listen")
RECONNECT_S = 1.0
IDLE_WAIT_S = 1.0  # how long one wait for a notification blocks before the stop check


def listener_params(application_name: str) -> dict[str, Any]:
    """libpq parameters of the default database, for a listener's own connection."""
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return {**params, "application_name": application_name, "autocommit": True}


class ChannelListener:
    """`LISTEN channel` on a thread of its own; `drain()` after each wake-up."""

    def __init__(self, *, channel: str, drain: Callable[[], None], name: str) -> None:
        assert channel.isidentifier(), "a channel is an identifier (it is not quoted)"
        self.channel, self.name, self._drain = channel, name, drain
        self._params = listener_params(name)
        self._stopped = threading.Event()
        self.listening = threading.Event()  # set while the LISTEN holds (tests wait on it)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread after its current drain (a worker's shutdown)."""
        self._stopped.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._listen()
            except psycopg.Error as error:
                log.warning("%s lost its connection: %s", self.name, error)
            self.listening.clear()
            self._stopped.wait(RECONNECT_S)
        close_old_connections()

    def _listen(self) -> None:
        with psycopg.connect(**self._params) as listener:
            listener.execute(f"LISTEN {self.channel}")
            self.listening.set()
            self._drain_safely()  # anything committed while (re)connecting
            while not self._stopped.is_set():
                woken = list(listener.notifies(timeout=IDLE_WAIT_S, stop_after=1))
                if woken:
                    list(listener.notifies(timeout=0))  # one drain answers them all
                    self._drain_safely()

    def _drain_safely(self) -> None:
        try:
            self._drain()
        except Exception:  # a failed batch must not end the listener; the beat retries
            log.exception("%s: drain failed", self.name)
            connection.close()
        finally:
            close_old_connections()
