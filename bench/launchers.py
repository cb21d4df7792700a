"""A launcher for Celery workers the bench starts: `NoopLauncher` of `bench.queue_workers`,
journaling every launch to `AGENTRUN_BENCH_JOURNAL` (one flushed line per launch, so the
execution ledger survives killing the worker).

Plugged in through the deployment setting, as any extra launcher would be:
`AGENTRUN_EXTRA_LAUNCHERS=noop=bench.launchers.JournalingNoopLauncher`.
"""

from __future__ import annotations

import os

from bench import worker_process
from bench.queue_workers import NoopLauncher


class JournalingNoopLauncher(NoopLauncher):
    def __init__(self) -> None:
        super().__init__(stamp=False)
        # On `worker_process`, where `NoopLauncher.launch` reads the journal.
        if worker_process.JOURNAL.file is None:
            worker_process.JOURNAL = worker_process.Journal(
                os.environ.get("AGENTRUN_BENCH_JOURNAL")
            )
