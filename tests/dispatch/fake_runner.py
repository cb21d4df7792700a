"""A test-double runner, used ONLY by the dispatch tests until `manage.py runner` exists
(the runner issue replaces it with the real runner and the `scripted` backend).

The local launcher starts it through `AGENTRUN_LOCAL_RUNNER_COMMAND`. Like the real
runner, it talks to agentrun over HTTP only, with the run-scoped key the launcher put in
its environment: claim the run, ack and finish each command, finish the run. Standard
library only; it prints what it did to its log file.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from typing import Any


def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    url = os.environ["AGENTRUN_API_URL"].rstrip("/") + "/api/v1" + path
    request = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['AGENTRUN_RUNNER_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


def main(argv: list[str]) -> int:
    run_id = argv[argv.index("--run") + 1]
    hold = float(argv[argv.index("--hold") + 1]) if "--hold" in argv else 0.0
    runner_id = os.environ["AGENTRUN_RUNNER_ID"]
    sys.stdout.write(f"pid={os.getpid()} pgid={os.getpgid(0)} sid={os.getsid(0)} run={run_id}\n")
    run = call("POST", f"/runs/{run_id}/claim", {"runner_id": runner_id, "lease_ms": 30_000})
    token = {"runner_id": runner_id, "lease_epoch": run["lease_epoch"]}
    sys.stdout.write(f"claimed {run_id} as {runner_id} epoch {run['lease_epoch']}\n")
    sys.stdout.flush()
    time.sleep(hold)
    for command in call("GET", f"/runs/{run_id}/commands")["items"]:
        call("POST", f"/commands/{command['id']}/ack", token)
        call("POST", f"/commands/{command['id']}/finish", {**token, "terminal_status": "completed"})
    call("POST", f"/runs/{run_id}/finish", {**token, "terminal_status": "completed"})
    sys.stdout.write(f"finished {run_id}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
