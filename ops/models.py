"""Heartbeats of the control plane's own processes (Celery workers and beat).

A worker or beat that dies (SIGKILL, out of memory, a broker error Celery gives up on)
stops writing its row; `/readyz`, the status dashboard and `agentrun_status` read the
newest row of each kind to say whether one is alive and when it last did something. One
row per process (name, host, pid): a restarted process writes a new row, so an operator
sees the restart; rows of processes gone for a day are deleted by the writers.
"""

from __future__ import annotations

from django.db import models


class ProcessKind(models.TextChoices):
    WORKER = "worker"
    BEAT = "beat"


class ProcessHeartbeat(models.Model):
    name = models.CharField(max_length=20, choices=ProcessKind.choices)
    hostname = models.CharField(max_length=200)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField()
    # worker: the last task it finished; beat: the last task it sent.
    last_task_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name", "hostname", "pid"], name="ops_heartbeat_process_uniq"
            )
        ]
        indexes = [models.Index(fields=["name", "-beat_at"], name="ops_heartbeat_newest_idx")]

    def __str__(self) -> str:
        return f"{self.name} {self.hostname}:{self.pid}"
