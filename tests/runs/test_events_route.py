"""The events route is async only for the ASGI handler: a sync handler (WSGI, the test
client) calls the DRF view directly, with no `async_to_sync` thread and event loop per
request (bench cell 2 measured that hop at several ms per append)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import iscoroutinefunction
from django.urls import resolve

from runs.api.long_poll import run_events


def test_the_route_is_a_coroutine_function_only_on_an_event_loop() -> None:
    callback = resolve("/api/v1/runs/run-x/events").func
    assert not iscoroutinefunction(callback)
    assert hasattr(callback, "cls") and callback.actions["post"] == "events"  # DRF's view

    async def asked_on_the_loop() -> bool:
        return iscoroutinefunction(callback)

    assert asyncio.run(asked_on_the_loop())


def test_a_sync_call_runs_the_drf_view_in_the_calling_thread() -> None:
    seen: list[str | None] = []

    def drf_view(request: object) -> str:
        seen.append(threading.current_thread().name)
        return "answered"

    route = run_events(drf_view)
    assert route(object()) == "answered"
    assert seen == [threading.current_thread().name]


@pytest.mark.django_db
def test_on_the_loop_the_route_returns_the_async_view() -> None:
    route = run_events(lambda request: None)

    async def call() -> bool:
        result = route(object())
        is_coroutine = asyncio.iscoroutine(result)
        result.close()
        return is_coroutine

    assert asyncio.run(call())
