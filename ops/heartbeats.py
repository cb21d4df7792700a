"""Worker and beat heartbeats: written by a thread in each process, read by `/readyz`
and the status.

`install()` (from `OpsConfig.ready`) connects Celery's `worker_ready` and `beat_init`
signals; each starts one daemon thread that upserts the process's `ProcessHeartbeat` row
every `AGENTRUN_HEARTBEAT_INTERVAL_S`. The API process connects them too and they never
fire there. A thread, not a beat task: a heartbeat must not depend on the broker and the
beat it is meant to watch. `task_postrun` (worker) and `before_task_publish` (beat) note
the time of the last task, written with the next heartbeat.

A process is live while its newest heartbeat is younger than
`AGENTRUN_HEARTBEAT_STALE_S` (default twice the interval: one late write on a loaded
machine is not a death).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime, timedelta
from typing import Any

from celery import signals
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from agentrun import conf
from ops.models import ProcessHeartbeat, ProcessKind

log = logging.getLogger("agentrun.heartbeat")
KEEP_DEAD_ROWS = timedelta(days=1)


class HeartbeatWriter:
    """The heartbeat of this process, written until the process ends."""

    def __init__(self, name: ProcessKind) -> None:
        self.name = name
        self.started_at = timezone.now()
        self.last_task_at: datetime | None = None
        self._stopped = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, name=f"{self.name}-heartbeat", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()

    def write(self) -> None:
        ProcessHeartbeat.objects.update_or_create(
            name=self.name,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            defaults={
                "started_at": self.started_at,
                "beat_at": timezone.now(),
                "last_task_at": self.last_task_at,
            },
        )

    def _loop(self) -> None:
        interval = conf.heartbeat_interval_s()
        self._prune()
        while not self._stopped.is_set():
            try:
                close_old_connections()  # a connection the server dropped is reopened
                self.write()
            except DatabaseError:
                log.warning("heartbeat of %s not written", self.name, exc_info=True)
            self._stopped.wait(interval)

    def _prune(self) -> None:
        cutoff = timezone.now() - KEEP_DEAD_ROWS
        try:
            ProcessHeartbeat.objects.filter(name=self.name, beat_at__lt=cutoff).delete()
        except DatabaseError:
            log.warning("old heartbeats not pruned", exc_info=True)


_writer: HeartbeatWriter | None = None


def _start(name: ProcessKind) -> None:
    global _writer
    if _writer is None:
        _writer = HeartbeatWriter(name)
        _writer.start()


def _on_worker_ready(**kwargs: Any) -> None:
    _start(ProcessKind.WORKER)


def _on_beat_init(**kwargs: Any) -> None:
    _start(ProcessKind.BEAT)


def _on_task_done(**kwargs: Any) -> None:
    if _writer is not None:
        _writer.last_task_at = timezone.now()


def install() -> None:
    """Connect the signals (weak=False: the handlers are module functions, kept anyway)."""
    signals.worker_ready.connect(_on_worker_ready, weak=False)
    signals.beat_init.connect(_on_beat_init, weak=False)
    signals.task_postrun.connect(_on_task_done, weak=False)
    signals.before_task_publish.connect(_on_task_done, weak=False)


def liveness(*, now: datetime | None = None) -> dict[str, dict[str, Any]]:
    """For worker and beat: whether one is live, the age of its newest heartbeat, when it
    last ran a task (worker) or sent one (beat), and how many processes are live."""
    now = now or timezone.now()
    stale_after = conf.heartbeat_stale_s()
    return {kind.value: _kind_liveness(kind, now, stale_after) for kind in ProcessKind}


def _kind_liveness(kind: ProcessKind, now: datetime, stale_after: float) -> dict[str, Any]:
    rows = ProcessHeartbeat.objects.filter(name=kind).order_by("-beat_at")
    newest = rows.first()
    fresh_since = now - timedelta(seconds=stale_after)
    if newest is None:
        return {
            "ok": False,
            "age_seconds": None,
            "stale_after_seconds": stale_after,
            "live_count": 0,
            "last_task_at": None,
            "pid": None,
            "hostname": None,
        }
    last_task = rows.exclude(last_task_at=None).order_by("-last_task_at").first()
    return {
        "ok": newest.beat_at >= fresh_since,
        "age_seconds": round((now - newest.beat_at).total_seconds(), 3),
        "stale_after_seconds": stale_after,
        "live_count": rows.filter(beat_at__gte=fresh_since).count(),
        "last_task_at": last_task.last_task_at if last_task else None,
        "pid": newest.pid,
        "hostname": newest.hostname,
    }
