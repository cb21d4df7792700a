"""Celery tasks of the project package (autodiscovered like each app's `tasks.py`)."""

from __future__ import annotations

import logging
from collections import Counter

from celery import shared_task

from agentrun.doctor import diagnose
from agentrun.task_queues import TaskName

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
