"""What every bench worker process (`python -m bench.workers KIND`) shares with the cell
that started it, whichever queue or relay it runs.

- The protocol: `ready` once set up (its start-up heap frozen), wait for `go` on stdin, one
  JSON result line at the end.
- The journal: one flushed line per execution, so a cell can count what a SIGKILLed worker
  did (cell 5, chaos, kills workers mid-batch).
- The per-process settings `bench.workers.main` takes from its arguments (`--journal`,
  `--work-ms`, `--stall-s`). They live here, not in `bench.workers`, because that module
  runs as `__main__`: a worker module importing `bench.workers` would get a second copy
  whose settings `main` never set. Read them as `worker_process.NAME` at call time, never
  `from … import` them, for the same reason (`main` rebinds them).
"""

from __future__ import annotations

import gc
import json
import sys
import threading
import time
from typing import Any

PEER_ENTRYPOINT = "bench_noop"


class Journal:
    """Append-only execution log that survives SIGKILL (one flushed line per event)."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "a", buffering=1) if path else None  # noqa: SIM115
        self.lock = threading.Lock()

    def write(self, kind: str, item: str) -> None:
        if self.file is not None:
            with self.lock:
                self.file.write(f"{kind} {item} {time.time():.6f}\n")


JOURNAL = Journal(None)

WORK_S = 0.0  # each item takes this long (`--work-ms`)
RUN_OPTIONS: dict[str, Any] = {}  # pgqueuer: the stall (heartbeat) timeout for chaos


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def wait_for_go() -> float:
    # Every kind's worker, set up, freezes its start-up heap out of the garbage collector's
    # full passes, as agentrun's Celery worker does when ready (`agentrun.celery`): the
    # same treatment on both sides of a figure.
    gc.collect()
    gc.freeze()
    emit({"ready": True})
    line = sys.stdin.readline()
    if line.strip() != "go":
        sys.exit(0)
    return time.time()
