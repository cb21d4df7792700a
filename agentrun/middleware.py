"""Request middleware: bind the ids of the request's target to every log line."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from agentrun import logs

# The first path segment after /api/v1/ names what the id in the URL is.
_ID_NAMES = {
    "runs": "run_id",
    "commands": "command_id",
    "sessions": "session_id",
    "tasks": "task_id",
    "runner-jobs": "runner_job_id",
}


def _target_ids(path: str) -> dict[str, str]:
    parts = [p for p in path.split("/") if p]
    ids = {}
    for index, part in enumerate(parts[:-1]):
        name = _ID_NAMES.get(part)
        if name and index >= 2:
            ids[name] = parts[index + 1][:200]
    return ids


class LogContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        request_id = request.headers.get("X-Request-Id", "")[:100] or uuid.uuid4().hex
        with logs.bind(request_id=request_id, **_target_ids(request.path)):
            response = self.get_response(request)
        response["X-Request-Id"] = request_id
        return response
