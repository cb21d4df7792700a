"""A small JSON-over-HTTP client for the agentrun API, with retries inside a deadline.

Connection failures and 5xx answers are retried with exponential backoff and jitter
until the caller's deadline (for a runner: the end of its lease); 4xx answers are raised
at once as `ApiError`, carrying the error envelope's code.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

RETRY_BASE_S = 0.2
RETRY_CAP_S = 5.0


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        error = body.get("error") if isinstance(body, dict) else None
        self.status = status
        self.code = (error or {}).get("code", "")
        self.body = body
        super().__init__(f"{status} {self.code}: {(error or {}).get('message', body)}")


class ApiUnavailable(Exception):
    """The API could not be reached before the deadline."""


class ApiClient:
    def __init__(self, base_url: str, key: str, *, timeout_s: float = 40.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.key = key
        self.timeout_s = timeout_s

    def get(self, path: str, *, deadline: float | None = None, **params: Any) -> Any:
        query = "&".join(f"{k}={v}" for k, v in params.items() if v is not None)
        return self.call("GET", f"{path}?{query}" if query else path, deadline=deadline)

    def post(self, path: str, body: dict[str, Any], *, deadline: float | None = None) -> Any:
        return self.call("POST", path, body, deadline=deadline)

    def post_or_stop(
        self,
        path: str,
        body: dict[str, Any],
        *,
        deadline: float,
        on_stop: Callable[[str], None],
        refusal: Callable[[ApiError], str],
    ) -> Any | None:
        """A runner write that stops the runner when it is refused (`refusal` says why) or
        the API stays unreachable until the lease ends; None when it stopped."""
        try:
            return self.post(path, body, deadline=deadline)
        except ApiError as error:
            on_stop(refusal(error))
        except ApiUnavailable:
            on_stop("lost-api")
        return None

    def call(
        self, method: str, path: str, body: Any = None, *, deadline: float | None = None
    ) -> Any:
        """One API call, retried on transient failures until `deadline` (monotonic)."""
        attempt = 0
        while True:
            try:
                return self._once(method, path, body)
            except ApiUnavailable:
                attempt += 1
                delay = min(RETRY_CAP_S, RETRY_BASE_S * 2**attempt) * random.uniform(0.5, 1)
                if deadline is None or time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)

    def _once(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base_url}/api/v1{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            payload = _json_or_text(error.read())
            if error.code >= 500:
                raise ApiUnavailable(f"{error.code} from {path}") from error
            raise ApiError(error.code, payload) from error
        except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
            raise ApiUnavailable(f"{method} {path}: {error}") from error


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": {"code": "", "message": raw.decode(errors="replace")[:500]}}
