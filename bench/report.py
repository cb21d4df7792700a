"""`python -m bench.report [latest.json]`: the figures of a run as Markdown tables.

This is how the tables in bench/README.md were made; run it after `make bench` to compare.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.env import RESULTS


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value != value:
        return "n/a"
    if isinstance(value, int | float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def side(summary: dict[str, Any], metric: str, unit: str) -> str:
    text = f"{fmt(summary.get('median'))} [{fmt(summary.get('min'))}-{fmt(summary.get('max'))}]"
    text += f" {unit}"
    if metric == "rate" and "p50_ms_median" in summary:
        text += f" (p50 {fmt(summary['p50_ms_median'])} / p99 {fmt(summary['p99_ms_median'])} ms)"
    elif metric not in ("rate", "value") and "p99_ms_median" in summary:
        text += f" (p99 {fmt(summary['p99_ms_median'])})"
    return text


def ledger(figure: dict[str, Any]) -> str:
    bad = []
    for name in ("agentrun", "reference"):
        for sample in figure["samples"][name]:
            led = sample["ledger"]
            if led["lost"] or led["duplicates"] or led["order_violations"]:
                bad.append(
                    f"{name}: lost {led['lost']}, dup {led['duplicates']}, "
                    f"order {led['order_violations']}"
                )
    return "ok" if not bad else "; ".join(sorted(set(bad)))


def table(cell: dict[str, Any]) -> list[str]:
    lines = [
        "| figure | agentrun | reference | ratio median [min-max] | verdict | goal | ledger |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in cell.get("figures", []):
        if f.get("error"):
            lines.append(f"| {f['key']} | error: {f['error']} | | | | | |")
            continue
        metric, unit = f["metric"], f["unit"]
        ratio = f["ratio"]
        goal = "-"
        if f["goal"]:
            goal = f"{f['goal'][0]} {f['goal'][1]}: {'met' if f['goal_met'] else 'missed'}"
        lines.append(
            f"| {f['key']} | {f['agentrun']['name']} {side(f['agentrun'], metric, unit)} "
            f"| {f['reference']['name']} {side(f['reference'], metric, unit)} "
            f"| {fmt(ratio['median'])} [{fmt(ratio['min'])}-{fmt(ratio['max'])}] "
            f"| {f['verdict']} | {goal} | {ledger(f)} |"
        )
    return lines


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else RESULTS / "latest.json"
    run = json.loads(path.read_text())
    machine = run["machine"]
    print(
        f"Run: {run['started']} ({run['mode']}), {run['seconds']:.0f} s, "
        f"git {machine['git_head']}, nproc {machine['nproc']}, {machine['postgres_version']}"
    )
    for number, cell in run["cells"].items():
        print(f"\n### Cell {number}: {cell['name']} ({cell.get('seconds', '?')} s)\n")
        if "error" in cell:
            print(f"error: {cell['error']}")
            continue
        if cell.get("figures"):
            print("\n".join(table(cell)))
        for note in cell.get("notes", []):
            print(f"\n- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
