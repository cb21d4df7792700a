"""A launcher for Celery workers the bench starts: `NoopLauncher` of `bench.workers`,
journaling every launch to `AGENTRUN_BENCH_JOURNAL` (one flushed line per launch, so the
execution ledger survives killing the worker).

Plugged in through the deployment setting, as any extra launcher would be:
`AGENTRUN_EXTRA_LAUNCHERS=noop=bench.launchers.JournalingNoopLauncher`.
"""

from __future__ import annotations

import os

from bench import workers


class JournalingNoopLauncher(workers.NoopLauncher):
    def __init__(self) -> None:
        super().__init__(stamp=False)
        if workers.JOURNAL.file is None:
            workers.JOURNAL = workers.Journal(os.environ.get("AGENTRUN_BENCH_JOURNAL"))
