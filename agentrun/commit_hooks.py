"""Callbacks on commit, registered once per transaction.

A service that may write the same kind of row several times in one transaction (one
event append after another) wants one wake-up after the commit, not one per write: the
batch a wake-up triggers takes everything the transaction committed.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection, transaction


def on_commit_once(callback: Callable[[], None]) -> None:
    """Run `callback` after the current transaction commits, unless it is registered for
    this transaction already. Needs a transaction (outside one, Django runs it at once)."""
    # Django keeps this transaction's callbacks as (savepoint ids, callback, robust).
    if any(entry[1] is callback for entry in connection.run_on_commit):
        return
    transaction.on_commit(callback)
