"""Cell 2's floor: what a request to the runner append costs without the append.

Three references, each a step less than the one before, all served by the same gunicorn as
agentrun's endpoint (`bench.http_settings`, `bench.http_wsgi`) and sent the same requests
(same body, same `Authorization` header, same keep-alive clients):

- `FloorRunViewSet` (DRF floor): agentrun's own `RunViewSet`, routed as the real events
  route is, through Django's handler and agentrun's whole middleware. A runner's POST is
  authenticated exactly as the real one (`perform_authentication`: the throttle check and
  the key's digest; the key itself is checked by the service's first statement, which the
  floor does not run), its path id checked, its body parsed (`DepthLimitedJSONParser`) and
  validated by the same serializer (`EventAppendIn`, fast path included), and its events
  built (`new_events`). Then, instead of `append_runner_events`, the events are given a
  fixed id, seq and timestamp (the shapes and sizes of real ones) and rendered as the
  real answer is (`appended_events_out`, then DRF's `Response` and `JSONRenderer`), 201.
  It reads and writes nothing in the database: no statement, no connection checkout.
- `bare_django_append` (Django): a plain Django view on the same middleware, no DRF, no
  authentication, no parsing: it reads the body and answers it back, 201 JSON.
- `bench.http_wsgi.bare_append` (gunicorn): a WSGI callable, no Django: reads the body
  and answers it back, 201 JSON.

The two bare views echo the request body: their answer is within about a third of the
real answer's size (a real item adds `id`, `run_id`, `seq` and `created_at` to `type` and
`payload`), which on loopback is a few hundred bytes more or less per request.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple, cast

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from rest_framework import status
from rest_framework.response import Response

from agentrun.ids import new_id
from runs.api import outputs as o
from runs.api.views import RunViewSet
from runs.models import Event

_EVENT_ID = new_id("evt")  # one fixed id, as long as every real one
_CREATED_AT = timezone.now()
_SEQ = 123_456  # as many digits as a long-lived run's


class _FixedEvent(NamedTuple):
    """What `appended_events_out` reads of an appended `Event` (a tuple: building 100 of
    them must cost the floor next to nothing; the real view gets its events built)."""

    id: str
    run_id: str
    seq: int
    type: str
    payload: dict[str, Any]
    created_at: datetime


class FloorRunViewSet(RunViewSet):
    """`RunViewSet` whose runner append calls no service (module docstring)."""

    def _append_events(
        self, body: Any, run_id: str, runner_key_digest: str | None = None
    ) -> Response:
        events = [
            _FixedEvent(_EVENT_ID, run_id, _SEQ + index, event.type, event.payload, _CREATED_AT)
            for index, event in enumerate(body.new_events())
        ]
        items = o.appended_events_out(cast(list[Event], events))
        return Response({"items": items}, status=status.HTTP_201_CREATED)


def bare_django_append(request: HttpRequest, pk: str) -> HttpResponse:
    """Django alone: the request body back as a 201 JSON answer (module docstring)."""
    return HttpResponse(request.body, status=201, content_type="application/json")
