"""CPU seconds of the processes behind one bench sample, read from `/proc/<pid>/stat`
(user + system time, every thread, in clock ticks of 10 ms): the bench database's client
backends (PostgreSQL's share of the work), and named groups of other processes (cell 7:
the relay worker processes, and the Tansu broker, which runs on the same two cores).

The backends are found in `pg_stat_activity` (this database's client backends, not the
sampler's own) every `scan_s`; every known process is read every `read_s`, with the time
of the read. `stop(until=...)` gives each group's CPU from `start()` to the last read at or
before `until` (the sample's last work, so a worker's idle tail after it is not counted),
summed over the group's processes: a backend that connected after `start()` counts from 0,
and one that exited counts to its last read (up to `read_s` of its tail is missed). Shared
server processes (WAL writer, checkpointer, background writer) are not counted.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from bench import env

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
BACKENDS = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend'
  AND pid <> pg_backend_pid()
"""


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of `pid` (all its threads); None once it has exited."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime (fields 14 and 15)


class CpuSampler:
    """CPU of this database's backends (group `postgres`) and of `groups` (name -> pids)
    between `start()` and `stop()`; see the module docstring."""

    def __init__(
        self, groups: dict[str, list[int]], *, scan_s: float = 0.2, read_s: float = 0.05
    ) -> None:
        self.group_of = {pid: name for name, pids in groups.items() for pid in pids}
        self.names = ["postgres", *groups]
        self.scan_s, self.read_s = scan_s, read_s
        self.first: dict[int, float] = {}
        self.reads: dict[int, list[tuple[float, float]]] = {}
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CpuSampler:
        self.conn = env.admin_connect()
        self._scan(at_start=True)
        for pid in self.group_of:
            self._known(pid, at_start=True)
        self.thread.start()
        return self

    def stop(self, until: float | None = None) -> dict[str, float]:
        """CPU seconds per group, to the last read at or before `until` (default: now)."""
        self.halt.set()
        self.thread.join()
        self._read()
        self.conn.close()
        until = time.time() if until is None else until
        out = dict.fromkeys(self.names, 0.0)
        for pid, reads in self.reads.items():
            upto = [cpu for at, cpu in reads if at <= until] or [self.first[pid]]
            out[self.group_of[pid]] += upto[-1] - self.first[pid]
        return out

    def _known(self, pid: int, at_start: bool) -> None:
        if pid not in self.first:
            self.first[pid] = (proc_cpu_s(pid) or 0.0) if at_start else 0.0
            self.reads[pid] = []

    def _scan(self, at_start: bool = False) -> None:
        for (pid,) in self.conn.execute(BACKENDS).fetchall():
            self.group_of.setdefault(pid, "postgres")
            self._known(pid, at_start)

    def _read(self) -> None:
        now = time.time()
        for pid, reads in self.reads.items():
            if (cpu := proc_cpu_s(pid)) is not None:
                reads.append((now, cpu))

    def _run(self) -> None:
        next_scan = time.monotonic() + self.scan_s
        while not self.halt.wait(self.read_s):
            if time.monotonic() >= next_scan:
                self._scan()
                next_scan = time.monotonic() + self.scan_s
            self._read()


def per_record_us(cpu: dict[str, float], records: int) -> dict[str, Any]:
    """CPU seconds -> microseconds per record."""
    return {name: round(seconds * 1e6 / max(records, 1), 1) for name, seconds in cpu.items()}
