"""Start the reference runner (`python -m runner run`) as a real subprocess against a live
API server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrun.auth import issue_api_key

ROOT = Path(__file__).resolve().parents[2]


def start_runner(
    *, api_url: str, run_id: str, tenant_id: str = "tenant-a", lease_ms: int = 3000
) -> subprocess.Popen[str]:
    key = issue_api_key(tenant_id=tenant_id, role="runner", run_id=run_id).secret
    env = {**os.environ, "AGENTRUN_API_URL": api_url, "AGENTRUN_RUNNER_KEY": key}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runner",
            "run",
            "--run",
            run_id,
            "--lease-ms",
            str(lease_ms),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )


def wait_for(condition: Callable[[], Any], timeout_s: float = 60) -> Any:
    """Poll `condition` until it returns something truthy (returned), or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
