"""The run events route's long-poll: how `GET /runs/{id}/events?wait=` waits.

Under ASGI an empty first page is awaited on the event loop, holding no thread and no
database connection (`runs/waiting.py`), and re-read when the append's NOTIFY comes; under a
sync handler (WSGI, the test client) the DRF view is called directly and waits in its own
thread (`runs.waiting.wait_for_event`). `run_events` wraps the viewset's route in
`runs/api/urls.py`; `RunViewSet.events` hands an empty page to it as a `PendingWait`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase
from rest_framework.response import Response

from runs import selectors
from runs.api import outputs as o
from runs.waiting import await_event, release_connection, reread_slot


def events_page_data(run: Any, query: dict[str, Any]) -> dict[str, Any]:
    """One page of a run's events after `after_seq`, serialized (`timed_out` false)."""
    page = selectors.events_page(run=run, after_seq=query["after_seq"], limit=query["limit"])
    next_after = page[-1].seq if page else query["after_seq"]
    data = {"items": page, "count": len(page), "next_after_seq": next_after, "timed_out": False}
    return dict(o.EventPageOut(data).data)


@dataclass(frozen=True)
class PendingWait:
    """A long-poll whose first page was empty, handed to `run_events` to await."""

    run: Any
    query: dict[str, Any]

    async def answer(self, placeholder: Response) -> Response:
        found = await await_event(
            run_id=self.run.id, after_seq=self.query["after_seq"], timeout_s=self.query["wait"]
        )
        if not found:
            return placeholder
        async with reread_slot():  # a few woken waiters at a time hold a connection
            data = await sync_to_async(self._reread)()
        response = Response(data, status=placeholder.status_code)
        for attribute in ("accepted_renderer", "accepted_media_type", "renderer_context"):
            setattr(response, attribute, getattr(placeholder, attribute))
        for header, value in placeholder.items():
            response[header] = value
        return response

    def _reread(self) -> dict[str, Any]:
        try:
            return events_page_data(self.run, self.query)
        finally:
            release_connection()  # back to the pool before the slot is given up


def released_after(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """The DRF view, then its connection back to the pool (before its slot is given up)."""

    def view(*args: Any, **kwargs: Any) -> Any:
        try:
            return drf_view(*args, **kwargs)
        finally:
            release_connection()

    return view


def run_events(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """The events route: async for the ASGI handler, the DRF view itself for a sync one
    (WSGI, the test client); see `_EventsRoute`."""
    return _EventsRoute(drf_view, _async_events_view(drf_view))


# The attributes by which `asgiref.sync.iscoroutinefunction`, which Django's handlers use to
# decide how to call a view, recognises a marked coroutine function (3.11; 3.12+).
_COROUTINE_MARKS = ("_is_coroutine", "_is_coroutine_marker")


class _EventsRoute:
    """A view that is a coroutine function only when asked from a running event loop.

    Django asks, per request, whether the view is a coroutine function: the ASGI handler
    asks on the event loop, and gets the async view (a long-poll waits there, holding no
    thread); a sync handler asks from its request thread, and gets the DRF view, called
    directly. Always async, every POST under a sync handler paid `async_to_sync`: a new
    thread and event loop per request, which then hopped back to the request thread for
    the DRF view (~6 ms of CPU per append on the bench machine, bench cell 2).
    """

    def __init__(self, drf_view: Callable[..., Any], async_view: Callable[..., Any]) -> None:
        functools.update_wrapper(self, drf_view)  # `cls`, `actions`, csrf_exempt: DRF's
        self._sync, self._async = drf_view, async_view
        self._mark = _coroutine_mark()

    def __getattr__(self, name: str) -> Any:
        if name in _COROUTINE_MARKS and _on_event_loop():
            return self._mark
        raise AttributeError(name)

    def __call__(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        view = self._async if _on_event_loop() else self._sync
        return view(request, *args, **kwargs)


def _coroutine_mark() -> Any:
    from asgiref.sync import markcoroutinefunction

    marked = markcoroutinefunction(lambda: None)
    return next(getattr(marked, name) for name in _COROUTINE_MARKS if hasattr(marked, name))


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _async_events_view(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """The events route for the ASGI handler: the DRF view runs in a thread as usual (auth,
    validation, first page, appends); an empty page with `wait` is awaited here, on the
    event loop, holding no thread and no database connection (runs/waiting.py)."""

    async def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        request.agentrun_async_wait = True  # type: ignore[attr-defined]
        if request.method == "GET":
            # A burst of polls queues here, on the loop, rather than in the pool's timeout.
            async with reread_slot():
                response: Response = await sync_to_async(released_after(drf_view))(
                    request, *args, **kwargs
                )
        else:
            response = await sync_to_async(drf_view)(request, *args, **kwargs)
        pending: PendingWait | None = getattr(response, "pending_wait", None)
        return response if pending is None else await pending.answer(response)

    return view
