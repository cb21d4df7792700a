"""`manage.py agentrun_doctor [--fix] [--json] [--limit N]`: find impossible states and,
with `--fix`, repair each through its service (`ops.doctor`). Idempotent: after a
`--fix`, a second run reports nothing. Without `--fix` it only reads.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ops.doctor import diagnose, repair


class Command(BaseCommand):
    help = "Find impossible states (and repair them with --fix)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--fix", action="store_true", help="repair what is found")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--limit", type=int, default=100, help="findings per kind (default 100)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        findings = diagnose(limit=max(1, options["limit"]))
        repairs = repair(findings) if options["fix"] else []
        if options["json"]:
            report = {
                "findings": [finding.as_dict() for finding in findings],
                "repairs": [done.as_dict() for done in repairs],
            }
            self.stdout.write(json.dumps(report, indent=2))
            return
        for finding in findings:
            self.stdout.write(f"{finding.kind}  {finding.object_id}  {finding.detail}")
        for done in repairs:
            mark = "fixed" if done.ok else "REFUSED"
            self.stdout.write(f"{mark}  {done.object_id}  {done.result}")
        fixed = sum(done.ok for done in repairs)
        summary = f"{len(findings)} problem(s) found" + (f", {fixed} repaired" if repairs else "")
        self.stdout.write(summary if findings else "no problems found")
