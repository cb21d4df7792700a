"""Cell 2's WSGI entry point: agentrun's application under `bench.http_settings`, and a bare
WSGI append (`/bare/…`, no Django) beside it, in the same gunicorn worker.

Every other path goes to Django unchanged: one `str.startswith` more per request.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ["DJANGO_SETTINGS_MODULE"] = os.environ.get("BENCH_HTTP_SETTINGS", "bench.http_settings")
django_application = get_wsgi_application()

BARE_PREFIX = "/bare/"


def bare_append(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """gunicorn alone: the request body back as a 201 JSON answer (`bench.http_floor`)."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    start_response("201 Created", headers)
    return [body]


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ.get("PATH_INFO", "").startswith(BARE_PREFIX):
        return bare_append(environ, start_response)
    return django_application(environ, start_response)
