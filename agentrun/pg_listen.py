"""A worker's wake-up by PostgreSQL: one `LISTEN` connection, one drain thread per channel.

A commit that makes work due sends `NOTIFY <channel>`: a dispatch intent's (a trigger of
the table, so no service pays a statement for it), an append's outbox records (sent
after its commit, `runs.sql`).
PostgreSQL delivers it to every listening worker. The listener thread hands each
notification to its channel's drain thread, which works batches in-process until one
comes back short (`WorkerDrain.drain`), so the broker is not on the pickup path. A
drain thread per channel, so a relay batch producing to Kafka never delays a dispatch
pickup, and one drain answers every notification that came while it ran. A listener of
one channel (a worker that consumes only the dispatch queue) drains on its own thread:
there is no other channel to delay, and the pickup saves a thread wake-up between the
notification and the claim (bench cell 4: 0.6 to 2 ms of the commit → launch path at
load 10 to 15 on this machine, against PgQueuer's 0.2 ms from notification to dequeue, whose
event loop reads the notification and dequeues on the same connection).

Claims are `SKIP LOCKED`, so several listening workers (and the Celery tasks of workers
that do not listen) share a burst without waiting for each other. A notification is only
an optimisation, like the on-commit Celery wake-up: one lost while the connection was
down is made up for by a drain after every (re)connection, and the beat stays the safety
net. Each drain runs on its thread's own Django connection, kept between drains and
closed when it is unusable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from celery import signals
from django.db import connection

from agentrun import conf
from agentrun.task_queues import TASK_QUEUES, TaskName

log = logging.getLogger("agentrun.listen")
RECONNECT_S = 1.0
IDLE_WAIT_S = 1.0  # how long one wait for a notification blocks before the stop check


def listener_params(application_name: str) -> dict[str, Any]:
    """libpq parameters of the default database, for a listener's own connection."""
    params = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return {**params, "application_name": application_name, "autocommit": True}


class _Drainer:
    """One channel's drain, run once per wake-up (wake-ups that come while it runs are
    folded into one more run): on a thread of its own, or `inline` on the listener's
    thread (`run_if_woken`, between two reads of its connection)."""

    def __init__(
        self, *, channel: str, drain: Callable[[], None], name: str, inline: bool = False
    ) -> None:
        self.channel, self.name, self._drain, self.inline = channel, name, drain, inline
        self._wanted = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        if not self.inline:
            self._thread.start()

    def wake(self) -> None:
        self._wanted.set()

    def run_if_woken(self) -> None:
        """The inline drain: on the listener's thread, once per wake-up since the last."""
        if self.inline and self._wanted.is_set():
            self._wanted.clear()
            self._drain_safely()

    def stop(self) -> None:
        self._stopped.set()
        self._wanted.set()
        if not self.inline:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopped.is_set():
                break
            self._wanted.clear()
            self._drain_safely()
        connection.close()  # the thread ends, and with it its connection

    def _drain_safely(self) -> None:
        try:
            self._drain()
        except Exception:  # a failed batch must not end the listener; the beat retries
            log.exception("%s: drain failed", self.name)
            connection.close()
        finally:
            _keep_usable_connection()


def _keep_usable_connection() -> None:
    """Keep the drain thread's Django connection for its next drain, unless it broke.

    Why not `close_old_connections()`: without a pool (`CONN_MAX_AGE = 0`, as Celery
    workers run) it closed the connection after every drain, so every pickup first started
    a PostgreSQL backend: 3.5 to 7.5 ms of the wake-up → launch path on this machine (bench
    cell 4, deployed). One connection per drain thread is held instead, as the listener
    holds its own; it sits idle outside any transaction between drains."""
    if connection.connection is None or not connection.errors_occurred:
        return
    if connection.is_usable():
        connection.errors_occurred = False
    else:
        connection.close()


class ChannelListener:
    """`LISTEN` each channel on one connection of its own; its `drain()` after each
    wake-up, on the channel's drain thread, or on the listener's own thread when it
    listens to one channel only."""

    def __init__(self, *, drains: Mapping[str, Callable[[], None]], name: str) -> None:
        assert drains and all(channel.isidentifier() for channel in drains), (
            "a channel is an identifier (it is not quoted)"
        )
        self.name = name
        inline = len(drains) == 1
        self._drainers = {
            channel: _Drainer(channel=channel, drain=drain, name=f"{name}-{channel}", inline=inline)
            for channel, drain in drains.items()
        }
        self._params = listener_params(name)
        self._stopped = threading.Event()
        self.listening = threading.Event()  # set while the LISTEN holds (tests wait on it)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def listens_to(self, channel: str) -> bool:
        return channel in self._drainers

    def start(self) -> None:
        for drainer in self._drainers.values():
            drainer.start()
        self._thread.start()

    def stop(self) -> None:
        """End the threads after their current drains (a worker's shutdown)."""
        self._stopped.set()
        self._thread.join(timeout=10)
        for drainer in self._drainers.values():
            drainer.stop()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._listen()
            except psycopg.Error as error:
                log.warning("%s lost its connection: %s", self.name, error)
            self.listening.clear()
            self._stopped.wait(RECONNECT_S)
        connection.close()  # an inline drain's Django connection ends with the thread

    def _listen(self) -> None:
        with psycopg.connect(**self._params) as listener:
            for channel in self._drainers:
                listener.execute(f"LISTEN {channel}")
            self.listening.set()
            for drainer in self._drainers.values():
                drainer.wake()  # anything committed while (re)connecting
            while not self._stopped.is_set():
                for drainer in self._drainers.values():
                    drainer.run_if_woken()  # an inline drain, before the next wait
                for notify in listener.notifies(timeout=IDLE_WAIT_S, stop_after=1):
                    self._drainers[notify.channel].wake()
                for notify in listener.notifies(timeout=0):  # the rest of a burst
                    self._drainers[notify.channel].wake()


@dataclass(frozen=True)
class WorkerDrain:
    """What an app asks of a Celery worker's listener: on `channel`, in workers that
    consume `task`'s queue (`-Q`), run `full_batch` until it says the batch came back short.
    On while the worker's LISTEN pickup is (`AGENTRUN_DISPATCH_LISTEN`, one switch for
    every drain) and `wanted()` says so at the worker's start. `name` is for the worker's
    log (`<name> listener started`)."""

    name: str
    channel: str
    task: TaskName
    full_batch: Callable[[], bool]  # one batch; True when it claimed a whole batch
    wanted: Callable[[], bool] = lambda: True

    def drain(self) -> None:
        """Batches until one comes back short: the backlog is drained."""
        while self.full_batch():
            pass

    def enabled(self) -> bool:
        return conf.dispatch_listen() and self.wanted()


_drains: list[WorkerDrain] = []
_listener: ChannelListener | None = None


def register_worker_drain(drain: WorkerDrain) -> None:
    """Register an app's drain (from its `AppConfig.ready`); the first one connects the
    worker signals. The apps register; this module imports none of them."""
    if not _drains:
        signals.worker_ready.connect(_on_worker_ready, weak=False)
        signals.worker_shutdown.connect(_on_worker_shutdown, weak=False)
    _drains.append(drain)


def listening_on(channel: str) -> bool:
    """True while this worker process's listener holds its LISTEN on `channel`: every
    notification on it committed from now on reaches this process's drain (and anything
    committed while it reconnected is drained after the reconnection)."""
    listener = _listener
    return listener is not None and listener.listening.is_set() and listener.listens_to(channel)


def _consumed_queues(consumer: Any) -> set[str]:
    queues = getattr(getattr(consumer, "task_consumer", None), "queues", None) or []
    return {queue.name for queue in queues}


def _on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    global _listener
    consumed = _consumed_queues(sender)
    wanted = [d for d in _drains if TASK_QUEUES[d.task].value in consumed and d.enabled()]
    if _listener is not None or not wanted:
        return
    drains = {d.channel: d.drain for d in wanted}
    _listener = ChannelListener(drains=drains, name="agentrun-worker-listener")
    _listener.start()
    for d in wanted:
        log.info("%s listener started", d.name, extra={"channel": d.channel})


def _on_worker_shutdown(**kwargs: Any) -> None:
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None
