"""Small worker loops the fault tests run as processes: `python -m tests.faults.loops reap`.

`reap` calls the lease reaper (runs/services/reaper.py) every `--interval` seconds with
`--grace-ms`, and prints one JSON line per pass that did something, plus its own wall clock
at start (to show a skewed clock is in effect).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["reap"])
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--grace-ms", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=30)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")
    django.setup()
    from runs.services.reaper import reap_expired_leases

    print(json.dumps({"clock": time.time()}), flush=True)
    ends = time.monotonic() + args.seconds
    while time.monotonic() < ends:
        counts = reap_expired_leases(limit=100, grace_ms=args.grace_ms)
        if counts.reaped:
            print(json.dumps({"clock": time.time(), **counts.as_dict()}), flush=True)
        time.sleep(args.interval)
    sys.exit(0)


if __name__ == "__main__":
    main()
