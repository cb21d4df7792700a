"""Event streaming: the backend's events are buffered and posted in batches.

A flusher thread posts whatever has accumulated every `interval_s` (or as soon as
`max_batch` events wait), so a streamed reply is a handful of requests, not one per
delta. A post answered with `late-write-rejected` events means the run was cancelled; a
409 `stale_lease` means this runner lost its claim. Both stop the runner.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from runner.client import ApiClient, ApiError
from runner.phases import LATE_WRITE_REJECTED


class EventStream:
    def __init__(
        self,
        api: ApiClient,
        *,
        path: str,
        fence: dict[str, Any],
        deadline: Callable[[], float],
        on_stop: Callable[[str], None],
        interval_s: float = 0.15,
        max_batch: int = 200,
    ) -> None:
        self.api, self.path, self.fence = api, path, fence
        self.deadline, self.on_stop = deadline, on_stop
        self.interval_s, self.max_batch = interval_s, max_batch
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._post_lock = threading.Lock()  # one post at a time keeps batches in order
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="event-stream", daemon=True)
        self.posted_batches = 0

    def start(self) -> None:
        self._thread.start()

    def emit(self, type: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append({"type": type, "payload": payload})
            if len(self._pending) >= self.max_batch:
                self._wake.set()

    def close(self) -> None:
        """Flush what is left and stop the flusher."""
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=60)
        self.flush()

    def _run(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        with self._post_lock:
            self._flush_one()

    def _refusal(self, error: ApiError) -> str:
        if error.status == 401:  # the key was revoked: the run ended (while our lease held)
            return "lost-lease" if time.monotonic() > self.deadline() else "cancelled"
        return "lost-lease" if error.code == "stale_lease" else f"events: {error}"

    def _flush_one(self) -> None:
        with self._lock:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        if not batch:
            return
        answer = self.api.post_or_stop(
            self.path,
            {**self.fence, "events": batch},
            deadline=self.deadline(),
            on_stop=self.on_stop,
            refusal=self._refusal,
        )
        if answer is None:
            return
        self.posted_batches += 1
        if any(item["payload"].get("phase") == LATE_WRITE_REJECTED for item in answer["items"]):
            self.on_stop("cancelled")
