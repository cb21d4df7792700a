"""The one task of the broker cell (imported by its workers with `--include`): it journals
when it started, so latency = start - publish is measured in the worker, not the bench."""

from __future__ import annotations

import os
import time

from celery import shared_task


@shared_task(name="bench.broker_ping", ignore_result=True)
def broker_ping(item: str, sent_at: float) -> None:
    with open(os.environ["AGENTRUN_BENCH_JOURNAL"], "a") as journal:
        journal.write(f"{item} {time.time() - sent_at:.6f}\n")
