"""The block that collects one transaction's deferred writes, spelled once.

`agentrun.row_inserts` (new rows) and `sessions.session_writes` (session projection
changes) both keep what a service writes in a context variable and write it in one go
when the outermost block completes; a block inside another joins the outer one, and an
exception out of the block drops what it collected (the caller's transaction must then
roll back, so nothing was lost that had been written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def collecting_into(
    var: ContextVar[T | None], new: Callable[[], T], write: Callable[[T], None]
) -> Iterator[T]:
    """Collect into `var` (a `new()` collector, unless an outer block's is set already)
    and `write` it when the outermost block completes."""
    outer = var.get()
    if outer is not None:
        yield outer
        return
    pending = new()
    token = var.set(pending)
    try:
        yield pending
    finally:
        var.reset(token)
    write(pending)
