"""Start the reference runner (`python -m runner run`) as a real subprocess against a live
API server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
