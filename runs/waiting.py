"""Long-poll: wait until a run has an event after a seq, or a timeout passes.

One listener per process holds one autocommit connection that LISTENs on
`agentrun_run_change`, and it alone queries the database for waiters: a waiter registers
(run id, after_seq) and sleeps on an in-process event, holding no database connection (its
thread's Django connection is closed first, unless a transaction pins it). The listener
checks each newly registered waiter with one query per batch on its own connection (the
last seq of those runs); a notification carries `<run id>:<last seq>`, so it wakes the
waiters that seq has passed without a query. So a thousand sleeping long-polls cost one
database connection, not a thousand.

No event is missed: a waiter is checked only after it is registered *and* the listener is
LISTENing, so an append committed before that check is seen by it, and one committed after
it notifies the listener (seed `waitForRunChange`). If the listener loses its connection it
reconnects and checks every waiter once more: a lost notification costs a query, never an
event. While it cannot reconnect, waiters time out (an empty page; the client polls again).

Under ASGI the wait is async (`await_event`): the waiter is an asyncio future resolved from
the listener thread with `loop.call_soon_threadsafe`, so it holds neither a thread nor a
connection. The HTTP view (runs/api/views.py) reads its first page in sync code, gives the
connection back to the pool, awaits, and re-reads through `reread_slot()`: woken together,
a thousand waiters re-read a few at a time, never more at once than the pool can lend.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import psycopg
from django.db import connection
from psycopg.rows import TupleRow

from agentrun import conf
from agentrun.errors import not_ready
from agentrun.metrics import LONG_POLL_WAITERS
from runs.models import Event
from runs.services.event_log import RUN_CHANGE_CHANNEL

log = logging.getLogger("agentrun.runs")
RECONNECT_S = 0.5
APPLICATION_NAME = "agentrun-run-change-listener"  # how operators spot it in pg_stat_activity
# Raw SQL on the listener's own psycopg connection (the ORM is bound to Django's): one
# backward index probe of (run_id, seq) per run, however many events the run has.
LAST_SEQ_SQL = (
    "SELECT r.id, (SELECT max(e.seq) FROM agentrun_events e WHERE e.run_id = r.id) "
    "FROM unnest(%s::text[]) AS r(id)"
)


@dataclass(eq=False)
class Waiter:
    """One waiting call: `found` is set once the run has an event with seq > after_seq;
    an async waiter's `future` is resolved then too, on its own event loop."""

    run_id: str
    after_seq: int
    found: threading.Event = field(default_factory=threading.Event)
    future: asyncio.Future[None] | None = None

    def wake(self) -> None:
        """Called by the listener thread (under its lock)."""
        if self.found.is_set():
            return
        self.found.set()
        if self.future is not None:
            # Closed loop: its request is gone, nobody waits for this future any more.
            with contextlib.suppress(RuntimeError):
                self.future.get_loop().call_soon_threadsafe(_resolve, self.future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class RunChangeListener:
    """The process's LISTEN connection, and the waiters it checks and wakes, by run id."""

    def __init__(self, connect_params: dict[str, object]) -> None:
        self._params = connect_params
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = defaultdict(set)
        self._unchecked: set[str] = set()  # runs with a waiter registered since the last check
        self._session_waiters: dict[str, set[Waiter]] = defaultdict(set)
        # Rung by register() to wake the select(). Sockets, not a pipe: once closed (stop)
        # a late ring fails on the object instead of writing to a reused descriptor.
        self._bell_r, self._bell_w = socket.socketpair()
        self._bell_r.setblocking(False)
        self._bell_w.setblocking(False)
        self._listening = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-change-listener", daemon=True)
        self._thread.start()

    def register(self, run_id: str, after_seq: int, *, timeout_s: float) -> Waiter:
        """A waiter for `run_id`, to be checked; returns once notifications are received."""
        waiter = self.add(Waiter(run_id, after_seq))
        if not self._listening.wait(timeout_s):
            self.unregister(waiter)
            raise TimeoutError("the run-change listener could not LISTEN in time")
        return waiter

    async def register_async(self, run_id: str, after_seq: int, *, timeout_s: float) -> Waiter:
        """`register` for a coroutine: the waiter's future is resolved on this loop."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = self.add(Waiter(run_id, after_seq, future=future))
        deadline = time.monotonic() + timeout_s
        # Only while (re)connecting: poll the flag rather than block the loop on it.
        while not self._listening.is_set():
            if time.monotonic() >= deadline:
                self.unregister(waiter)
                raise TimeoutError("the run-change listener could not LISTEN in time")
            await asyncio.sleep(0.05)
        return waiter

    async def register_session_async(self, session_id: str, *, timeout_s: float) -> Waiter:
        """A waiter woken by the next notification of any run of `session_id`; returns once
        notifications are received, so a read made after it misses nothing."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = Waiter(session_id, -1, future=future)
        with self._lock:
            self._session_waiters[session_id].add(waiter)
        deadline = time.monotonic() + timeout_s
        while not self._listening.is_set():
            if time.monotonic() >= deadline:
                self.unregister_session(waiter)
                raise TimeoutError("the run-change listener could not LISTEN in time")
            await asyncio.sleep(0.05)
        return waiter

    def unregister_session(self, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._session_waiters.get(waiter.run_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._session_waiters[waiter.run_id]

    def add(self, waiter: Waiter) -> Waiter:
        with self._lock:
            self._waiters[waiter.run_id].add(waiter)
            self._unchecked.add(waiter.run_id)
        self._ring()
        return waiter

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            waiters = self._waiters.get(waiter.run_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[waiter.run_id]

    def stop(self) -> None:
        """Close the connection and end the thread (tests; a process's exit does it too)."""
        self._stopped.set()
        self._ring()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._bell_r.close()
            self._bell_w.close()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._listen()
            except psycopg.Error as error:
                log.warning("run-change listener lost its connection: %s", error)
            self._listening.clear()
            self._stopped.wait(RECONNECT_S)

    def _listen(self) -> None:
        params = {**self._params, "application_name": APPLICATION_NAME, "autocommit": True}
        with psycopg.connect(**params) as listener:  # type: ignore[arg-type]
            listener.execute(f"LISTEN {RUN_CHANGE_CHANNEL}")
            self._listening.set()
            self._take_unchecked()
            self._check(listener, None)  # anything missed while (re)connecting
            self._wake_sessions(None)
            while not self._stopped.is_set():
                notices = list(listener.notifies(timeout=0))
                runs = self._take_unchecked()
                for notice in notices:
                    run_id, _, rest = notice.payload.partition(":")
                    seq, _, session_id = rest.partition(":")
                    if session_id:
                        self._wake_sessions(session_id)
                    if seq.isdigit():  # the appender says how far the run got: no query
                        self._wake_passed(run_id, int(seq))
                    else:
                        runs.add(run_id)
                if runs:
                    self._check(listener, runs)
                if runs or notices:
                    # Notifications that arrive during a check's query are kept aside by
                    # psycopg, not left on the socket: collect them before select() again.
                    continue
                select.select([listener.fileno(), self._bell_r.fileno()], [], [], 1.0)
                self._ring_off()

    def _wake_passed(self, run_id: str, last_seq: int) -> None:
        """Wake the waiters of a run that has an event up to `last_seq` committed."""
        with self._lock:
            for waiter in self._waiters.get(run_id, ()):
                if last_seq > waiter.after_seq:
                    waiter.wake()

    def _wake_sessions(self, session_id: str | None) -> None:
        """Wake the waiters of one session (every session: None)."""
        with self._lock:
            groups = (
                list(self._session_waiters.values())
                if session_id is None
                else [self._session_waiters.get(session_id, set())]
            )
            for waiter in (waiter for group in groups for waiter in group):
                waiter.wake()

    def _ring(self) -> None:
        # Full: the bell rings already. Closed: the listener was stopped, and register()
        # times out waiting for it to LISTEN.
        with contextlib.suppress(OSError):
            self._bell_w.send(b"!")

    def _ring_off(self) -> None:
        with contextlib.suppress(BlockingIOError):  # empty now
            while self._bell_r.recv(4096):
                pass

    def _take_unchecked(self) -> set[str]:
        with self._lock:
            taken, self._unchecked = self._unchecked, set()
        return taken

    def _check(self, listener: psycopg.Connection[TupleRow], runs: set[str] | None) -> None:
        """Wake the waiters of `runs` (every run: None) whose run has passed their seq."""
        with self._lock:
            run_ids = [r for r in (self._waiters if runs is None else runs) if r in self._waiters]
        if not run_ids:
            return
        last_seqs = listener.execute(LAST_SEQ_SQL, [run_ids]).fetchall()
        with self._lock:
            for run_id, last_seq in last_seqs:
                for waiter in self._waiters.get(run_id, ()):
                    if last_seq is not None and last_seq > waiter.after_seq:
                        waiter.wake()


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


def release_connection() -> bool:
    """Close this thread's Django connection unless a transaction pins it; True if free.

    Django takes one again on the next query: from the pool (AGENTRUN_DB_POOL_SIZE), or a
    new connection without one.
    """
    if connection.in_atomic_block or (
        connection.connection is not None and not connection.autocommit
    ):
        return False
    connection.close()
    return True


def wait_for_event(*, run_id: str, after_seq: int, timeout_s: float) -> bool:
    """Return True as soon as the run has an event with seq > after_seq, False on timeout.

    Sleeps without a database connection: the thread's Django connection is closed first
    (reopened by its next query), unless a transaction pins it (ATOMIC_REQUESTS, a test's
    transaction); then it stays open, and is checked too, as only it sees its own rows.
    """
    deadline = time.monotonic() + timeout_s
    if not release_connection() and (
        Event.objects.filter(run_id=run_id, seq__gt=after_seq).exists()
    ):
        return True
    listener = run_change_listener()
    with LONG_POLL_WAITERS.track_inprogress():
        try:
            waiter = listener.register(run_id, after_seq, timeout_s=max(timeout_s, 5.0))
        except TimeoutError as error:
            raise not_ready("the run event stream is not available; retry") from error
        try:
            return waiter.found.wait(max(0.0, deadline - time.monotonic()))
        finally:
            listener.unregister(waiter)


async def await_event(*, run_id: str, after_seq: int, timeout_s: float) -> bool:
    """`wait_for_event` for the event loop: True once the run has an event past after_seq.

    The caller has given back its connection (`release_connection`): nothing here touches
    the database or blocks the loop; the listener thread resolves the waiter's future.
    """
    deadline = time.monotonic() + timeout_s
    listener = run_change_listener()
    release_request_thread()
    with LONG_POLL_WAITERS.track_inprogress():
        try:
            waiter = await listener.register_async(run_id, after_seq, timeout_s=max(timeout_s, 5.0))
        except TimeoutError as error:
            raise not_ready("the run event stream is not available; retry") from error
        try:
            assert waiter.future is not None
            remaining = max(0.0, deadline - time.monotonic())
            await asyncio.wait([waiter.future], timeout=remaining)
            return waiter.found.is_set()
        finally:
            listener.unregister(waiter)


def release_request_thread() -> None:
    """Let this request's sync thread end now rather than idle through the wait.

    Django's ASGI handler gives each request a one-thread executor (asgiref's
    ThreadSensitiveContext) that lives until the request ends: a thousand waiters would
    park a thousand threads. Dropping it here is safe: the request's sync code is done, its
    connection is back in the pool, and the next sync call (the re-read, request_finished)
    gets a fresh executor, shut down by the context as usual. Relies on asgiref internals
    (pinned in requirements.txt); if they change, the thread just idles as before.
    """
    from asgiref.sync import SyncToAsync

    executors = getattr(SyncToAsync, "context_to_thread_executor", None)
    context_var = getattr(SyncToAsync, "thread_sensitive_context", None)
    context = context_var.get(None) if context_var is not None else None
    if executors is None or context is None or getattr(context, "_executor", None) is not None:
        return  # no per-request executor to drop (or one its owner manages)
    executor = executors.pop(context, None)
    if executor is not None:
        executor.shutdown(wait=False)


_reread_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def reread_slots() -> int:
    """Long-poll reads at once (first pages and re-reads): half the pool, so other requests
    still get a connection; a burst of polls queues on the loop, not in the pool timeout."""
    pool = conf.db_pool_size() or 10
    return max(1, pool // 2)


@contextlib.asynccontextmanager
async def reread_slot() -> AsyncIterator[None]:
    """Hold one of this loop's long-poll read slots; the read inside gives its connection
    back before the slot is released."""
    loop = asyncio.get_running_loop()
    semaphore = _reread_slots.get(loop)
    if semaphore is None:
        semaphore = _reread_slots[loop] = asyncio.Semaphore(reread_slots())
    async with semaphore:
        yield
