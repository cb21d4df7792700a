"""The operations console's Celery task: the doctor's report (autodiscovered like each
app's `tasks.py`; its name keeps the `agentrun.` prefix it was scheduled and routed by)."""

from __future__ import annotations

import logging
from collections import Counter

from celery import shared_task

from agentrun.task_queues import TaskName
from ops.doctor import diagnose

# The logger keeps the name it had before ops existed: log filters and alerts select on it.
log = logging.getLogger("agentrun.doctor")


@shared_task(name=TaskName.DOCTOR_REPORT, ignore_result=True)
def doctor_report() -> dict[str, int]:
    """Run the doctor's checks and log each finding; repairs nothing (an operator runs
    `agentrun_doctor --fix` after reading why). Returns the count per kind."""
    findings = diagnose(limit=100)
    for finding in findings:
        log.warning(
            "doctor: %s %s: %s",
            finding.kind,
            finding.object_id,
            finding.detail,
            extra={"kind": finding.kind, "object_id": finding.object_id},
        )
    return dict(Counter(finding.kind for finding in findings))
