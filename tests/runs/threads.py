"""Race real threads on the database, each on its own connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def race(workers: list[Callable[[], Any]]) -> list[Any]:
    """Start every worker at the same instant; return each one's result or exception."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)

    def run(index: int, work: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[index] = work()
        except Exception as error:  # the caller counts winners and losers
            results[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results
