"""Dispatch test set-up: wake-ups go to an in-memory broker unless a test says otherwise
(no test leaves messages in the filesystem broker of a developer's data directory)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dispatch.helpers import celery_broker


@pytest.fixture(autouse=True)
def memory_broker() -> Iterator[None]:
    with celery_broker("memory://localhost/"):
        yield
