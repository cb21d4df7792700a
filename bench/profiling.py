"""Profiles with py-spy: where a slow path spends its wall time.

py-spy samples a running process (this one, or a gunicorn worker) from outside, with
`--idle` so that time blocked on PostgreSQL counts too: an append is mostly waiting on the
server, and a profile that hid that would point at the wrong thing. The raw collapsed
stacks go to bench/results/profile-<label>.txt; the summary keeps, for the stacks of the
workers (`focus`), the share of time waiting in psycopg and the functions of agentrun,
Django and psycopg with the most inclusive time.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import env

OURS = ("runs/", "sessions/", "outbox/", "dispatch/", "agentrun/", "queues/")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:()]*)(?::\d+)?\)$")


def py_spy_binary() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


@contextmanager
def profiled(
    label: str, *, seconds: float, focus: str, pid: int | None = None
) -> Iterator[dict[str, Any]]:
    """Sample `pid` (default: this process) for `seconds` while the body runs; the yielded
    dict is filled with the summary afterwards. The body should run at least `seconds`."""
    import os

    summary: dict[str, Any] = {"label": label}
    binary = py_spy_binary()
    if binary is None:
        summary["error"] = "py-spy not installed (pip install -r requirements-bench.txt)"
        yield summary
        return
    out = env.RESULTS / f"profile-{label}.txt"
    command = [
        binary,
        "record",
        "--pid",
        str(pid or os.getpid()),
        "--duration",
        str(int(seconds)),
        "--rate",
        "200",
        "--format",
        "raw",
        "--output",
        str(out),
        "--nonblocking",
        "--idle",
    ]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # let py-spy attach before the workload starts
    try:
        yield summary
    finally:
        _, err = spy.communicate(timeout=seconds + 60)
        if spy.returncode != 0 or not out.exists():
            summary["error"] = f"py-spy failed: {err.strip()[-300:]}"
        else:
            summary.update(summarize(out, focus))
            summary["raw"] = str(out.relative_to(env.ROOT))


def _frames(stack: str) -> list[tuple[str, str]]:
    frames = []
    for part in stack.split(";"):
        match = _FRAME.match(part.strip())
        if match:
            frames.append((match["func"], match["file"]))
        else:
            frames.append((part.strip(), ""))
    return frames


def _where(file: str) -> str:
    for marker in ("site-packages/", "/work/main/", "python3.11/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def summarize(path: Path, focus: str, top: int = 25) -> dict[str, Any]:
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    total = waiting = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if focus not in stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = _frames(stack)
        total += count
        names = {f"{func} ({_where(file)})" for func, file in frames}
        for name in names:
            inclusive[name] += count
        func, file = frames[-1]
        leaf[f"{func} ({_where(file)})"] += count
        if "psycopg" in file and any(w in func for w in ("wait", "execute", "commit", "fetch")):
            waiting += count
    if total == 0:
        return {"samples": 0}
    interesting = [
        (name, n)
        for name, n in inclusive.most_common()
        if any(o in name for o in OURS)
        or "django/db" in name
        or "psycopg" in name
        or "rest_framework" in name
        or "gunicorn" in name
        or "django/core" in name
    ]
    ours = [(name, n) for name, n in interesting if any(f"({o}" in name for o in OURS)]
    return {
        "samples": total,
        "ours_top": [{"frame": name, "share": round(n / total, 3)} for name, n in ours[:top]],
        "waiting_on_postgres_share": round(waiting / total, 3),
        "inclusive_top": [
            {"frame": name, "share": round(n / total, 3)} for name, n in interesting[:top]
        ],
        "self_top": [
            {"frame": name, "share": round(n / total, 3)} for name, n in leaf.most_common(15)
        ],
    }


def print_summary(summary: dict[str, Any], lines: int = 14) -> None:
    if "error" in summary:
        print(f"  profile {summary['label']}: {summary['error']}", flush=True)
        return
    print(
        f"  profile {summary['label']}: {summary.get('samples', 0)} samples, "
        f"{summary.get('waiting_on_postgres_share', 0):.0%} waiting in psycopg",
        flush=True,
    )
    print("   agentrun frames (inclusive):", flush=True)
    for item in summary.get("ours_top", [])[:lines]:
        print(f"    {item['share']:>6.1%}  {item['frame']}", flush=True)
    print("   leaf frames (self):", flush=True)
    for item in summary.get("self_top", [])[:6]:
        print(f"    {item['share']:>6.1%}  {item['frame']}", flush=True)
