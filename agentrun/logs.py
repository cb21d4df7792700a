"""Structured logging: one JSON object per line, with the ids of what is being worked on.

`bind(run_id=…, session_id=…)` puts ids into a context variable for the duration of a
block; every log record emitted inside it carries them (the request middleware binds the
ids in the URL, Celery tasks bind theirs). Every message and every extra field passes
through `agentrun.redaction` before it is written, so a token in a payload or an error
never reaches the logs. `AGENTRUN_LOG_FORMAT=json` turns the JSON lines on.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from agentrun.redaction import redact_json, redact_text

_context: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "agentrun_log_context", default=()
)
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


@contextmanager
def bind(**ids: str | None) -> Iterator[None]:
    """Attach ids (run_id, session_id, task_id, command_id, request_id…) to every log
    record emitted inside the block."""
    merged = {**dict(_context.get()), **{k: v for k, v in ids.items() if v}}
    token = _context.set(tuple(merged.items()))
    try:
        yield
    finally:
        _context.reset(token)


def current() -> dict[str, str]:
    return dict(_context.get())


class ContextFilter(logging.Filter):
    """Copies the bound ids onto each record (as attributes the formatters can read)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get():
            setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        entry.update(redact_json(_jsonable(extra)))
        if record.exc_info:
            entry["exception"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class RedactingTextFormatter(logging.Formatter):
    """The plain-text format, also redacted, with the bound ids appended."""

    def format(self, record: logging.LogRecord) -> str:
        ids = " ".join(f"{k}={v}" for k, v in _context.get())
        line = redact_text(super().format(record))
        return f"{line} [{ids}]" if ids else line


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


task_log = logging.getLogger("agentrun.tasks")


def log_task_result(*, task: Any = None, retval: Any = None, state: str = "", **_: Any) -> None:
    """Celery's `task_postrun`: one line per batch, INFO when it did work (a count above
    zero), DEBUG when it found nothing, so an idle control plane logs nothing at INFO.
    Failures are Celery's to log (ERROR, with the traceback)."""
    if state != "SUCCESS" or task is None:
        return
    counts = retval if isinstance(retval, dict) else {}
    did_work = any(
        isinstance(v, int | float) and not isinstance(v, bool) and v for v in counts.values()
    )
    summary = " ".join(f"{key}={value}" for key, value in counts.items())
    task_log.log(
        logging.INFO if did_work else logging.DEBUG, "%s: %s", task.name, summary or retval
    )
