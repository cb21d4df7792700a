"""Fixtures of the SDK tests: the real `openai` SDK against the live server or the real
server (uvicorn), turns run by real runner subprocesses on the scripted backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runs.models import TERMINAL_RUN_STATUSES, Run
from tests.runtime.server import Server, serving, wait_for


def _all_runs_ended() -> None:
    wait_for(
        lambda: not Run.objects.exclude(status__in=TERMINAL_RUN_STATUSES).exists(),
        what="every run of the test to end",
    )


@pytest.fixture
def sdk(live_server: Any) -> Callable[..., Any]:
    """`sdk(tenant, **options)`: the SDK on the live server for a new key of `tenant`."""
    from tests.compat_openai import world

    return lambda tenant="tenant-sdk", **options: world.client_for(
        live_server.url, tenant, **options
    )


@pytest.fixture
def dispatch(live_server: Any, tmp_path: Path) -> Iterator[Callable[[], int]]:
    """Dispatch pending turns to runners of the live server; at the end, wait for every
    run they started to end, so no runner outlives its test."""
    from tests.compat_openai import world

    yield lambda: world.dispatch_to(live_server.url, tmp_path)
    _all_runs_ended()


@pytest.fixture(scope="module")
def server(django_db_setup: None, django_db_blocker: Any) -> Iterator[Server]:
    """The real server (uvicorn, the production command line) on the test database, one
    per module."""
    with django_db_blocker.unblock(), serving() as running:
        yield running


@pytest.fixture
def settled() -> Iterator[None]:
    """At the end of a test, every run it started has ended (no runner outlives it)."""
    yield
    _all_runs_ended()
