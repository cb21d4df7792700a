"""Running N writer threads at once for the in-process cells (1, 2 and 9): each prepares
untimed, all are released together, and the elapsed time runs from that common start to
the last acknowledged operation.

Apart from `bench.harness` because it is how one side of a figure produces its load, not
how figures are compared and reported; the cells that start worker processes use
`bench.queues` instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class WorkerResult:
    done: int = 0  # operations acknowledged
    latencies_ms: list[float] = field(default_factory=list)
    acknowledged: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_workers(
    count: int,
    prepare: Callable[[int], Any],
    step: Callable[[Any, int, WorkerResult], None],
    *,
    seconds: float,
    finish: Callable[[Any], None] | None = None,
    max_ops: int | None = None,
) -> tuple[list[WorkerResult], float]:
    """Run `count` threads: each `prepare(index)` (untimed, e.g. connect), then all start
    together and call `step(state, op, result)` until `seconds` pass (or `max_ops`).

    Returns the per-worker results and the elapsed time from the common start to the
    last worker's last acknowledged operation. `finish(state)` runs untimed at the end.
    """
    results = [WorkerResult() for _ in range(count)]
    ends = [0.0] * count
    start_box: list[float] = []
    # The action runs once every worker has prepared, just before they are all released.
    barrier = threading.Barrier(count + 1, action=lambda: start_box.append(time.perf_counter()))

    def body(index: int) -> None:
        state = None
        try:
            state = prepare(index)
        except Exception as error:
            results[index].errors.append(f"prepare: {error!r}")
        try:
            barrier.wait()
            if state is None:
                return
            deadline = start_box[0] + seconds
            op = 0
            while time.perf_counter() < deadline and (max_ops is None or op < max_ops):
                step(state, op, results[index])
                op += 1
            ends[index] = time.perf_counter()
        except Exception as error:
            results[index].errors.append(repr(error))
            ends[index] = time.perf_counter()
        finally:
            if finish is not None and state is not None:
                finish(state)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    for thread in threads:
        thread.join()
    elapsed = max(ends) - start_box[0] if any(ends) else 0.0
    errors = [e for r in results for e in r.errors]
    if errors:
        raise RuntimeError(f"{len(errors)} worker errors, first: {errors[0]}")
    return results, elapsed
