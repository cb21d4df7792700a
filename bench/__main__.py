"""`python -m bench all|<cell>[,<cell>…] [--quick] [--profile]`: the single entry point.

Cells are named by number or name (see CELLS). Each cell runs on a freshly emptied,
`VACUUM ANALYZE`d `agentrun_bench` database; every figure prints one line; the summary
(machine facts, settings, every sample and ledger) goes to bench/results/latest.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench import env

CELLS = {
    "1": "event_append",
    "2": "http_append",
    "3": "dispatch_drain",
    "4": "pickup_latency",
    "5": "chaos",
    "6": "mvcc_pressure",
    "7": "outbox_relay",
    "8": "long_poll",
    "9": "turn_admission",
    "10": "growth",
    "11": "server_load",
    "12": "run_list",
    "13": "broker",
    "14": "streams",
    "15": "webhook_relay",
    "16": "heartbeat",
}
ORDER = ["1", "2", "8", "9", "3", "4", "5", "6", "7", "10", "11", "12", "13", "14", "15", "16"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("cells", help="all, or cells by number/name, comma-separated")
    parser.add_argument("--quick", action="store_true", help="every cell small (< 3 min)")
    parser.add_argument("--profile", action="store_true", help="py-spy the slowest paths")
    parser.add_argument(
        "--fresh-db", action="store_true", help="drop and re-create the bench databases first"
    )
    parser.add_argument("--output", default=str(env.RESULTS / "latest.json"))
    return parser.parse_args(argv)


def selected(spec: str) -> list[str]:
    if spec == "all":
        return ORDER
    names = {name: number for number, name in CELLS.items()}
    chosen = []
    for item in spec.split(","):
        number = item if item in CELLS else names.get(item)
        if number is None:
            sys.exit(f"bench: unknown cell {item!r}; cells: {', '.join(CELLS.values())}")
        chosen.append(number)
    return chosen


def main(argv: list[str]) -> int:
    args = parse(argv)
    env.configure()
    if args.fresh_db:
        env.drop_database(env.database_name())
        env.drop_database(env.database_name() + "_growth")
        env.drop_database(env.database_name() + "_growth_quick")
    env.prepare_database()
    import django

    django.setup()
    from bench.harness import Scale

    facts = env.machine_facts()
    if facts["postgres_settings"]["synchronous_commit"] != "on":
        sys.exit("bench: synchronous_commit must be on (issue 9, equal resources)")
    print(f"bench: {facts['postgres_version']}", flush=True)
    print(f"bench: nproc={facts['nproc']} settings={facts['postgres_settings']}", flush=True)
    scale = Scale(quick=args.quick, profile=args.profile)
    summary: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": facts,
        "cells": {},
    }
    started = time.monotonic()
    for number in selected(args.cells):
        summary["cells"][number] = run_cell(number, scale)
        write(args.output, summary, started)
    write(args.output, summary, started)
    print(f"bench: done in {time.monotonic() - started:.0f} s; summary in {args.output}")
    return 0


def run_cell(number: str, scale: Any) -> dict[str, Any]:
    name = CELLS[number]
    print(f"\n== cell {number}: {name} ==", flush=True)
    env.reset_tables()
    env.vacuum_analyze()
    began = time.monotonic()
    try:
        module = importlib.import_module(f"bench.cells.{name}")
        report = module.run(scale)
    except Exception as error:  # one broken cell must not lose the others' figures
        import traceback

        traceback.print_exc()
        return {"name": name, "error": f"{type(error).__name__}: {error}"}
    seconds = time.monotonic() - began
    print(f"  cell {number} took {seconds:.0f} s", flush=True)
    return {
        "name": name,
        "seconds": round(seconds, 1),
        "figures": [outcome.as_dict() for outcome in report.outcomes],
        "notes": report.notes,
        "data": report.data,
    }


def write(path: str, summary: dict[str, Any], started: float) -> None:
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    with open(path, "w") as out:
        json.dump(summary, out, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
