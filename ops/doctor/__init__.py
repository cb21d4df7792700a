"""The doctor: finds impossible states and, asked to, repairs them through the services.

Impossible states are ones no sequence of service calls leaves behind; they come from a
bug, a crash between systems, or a hand-edited row. Seven kinds are checked (`checks`):

- `session-active-run-terminal` / `session-active-run-missing`: a session still points at
  an active run that ended or does not exist, so it looks busy forever;
- `run-claimed-without-lease`: a claimed or running run with no lease row;
- `lease-on-terminal-run`: a lease row left on a terminal run;
- `intent-open-on-terminal-run`: an open dispatch intent whose run or command is terminal
  (no claim ever takes it, and it counts as backlog);
- `task-disagrees-with-run`: a queue task or its latest attempt still running while that
  attempt's run ended or is gone (the task holds a queue slot forever);
- `outbox-lease-lapsed`: an undelivered outbox record still leased a whole lease period
  after its lease ended.

`diagnose` lists findings (bounded per kind); `repair` fixes each through its repair
service (`repairs`), which re-checks under locks, so repairing twice changes nothing the
second time. `agentrun_doctor` and the report-only beat task `agentrun.doctor_report` call
these two functions and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from agentrun.errors import AgentRunError
from ops.doctor import checks, repairs
from ops.doctor.checks import Finding

__all__ = ["Finding", "Repair", "diagnose", "repair"]

CHECKS: list[Callable[[int, datetime], list[Finding]]] = [
    lambda limit, now: checks.sessions_with_ended_turn(limit),
    lambda limit, now: checks.sessions_with_missing_run(limit),
    lambda limit, now: checks.claimed_runs_without_lease(limit),
    lambda limit, now: checks.leases_on_terminal_runs(limit),
    lambda limit, now: checks.open_intents_of_ended_runs(limit),
    lambda limit, now: checks.tasks_disagreeing_with_run(limit),
    lambda limit, now: checks.outbox_leases_lapsed(limit, now=now),
]

REPAIRS: dict[str, Callable[[str], str]] = {
    "session-active-run-terminal": lambda pk: repairs.end_session_turn(session_id=pk),
    "session-active-run-missing": lambda pk: repairs.end_session_turn(session_id=pk),
    "run-claimed-without-lease": lambda pk: repairs.restore_run_lease(run_id=pk),
    "lease-on-terminal-run": lambda pk: repairs.release_terminal_claim(run_id=pk),
    "intent-open-on-terminal-run": lambda pk: repairs.fence_intent(intent_id=pk),
    "task-disagrees-with-run": lambda pk: repairs.reproject_task(task_id=pk),
    "outbox-lease-lapsed": lambda pk: repairs.release_lapsed_outbox_lease(record_id=pk),
}


@dataclass(frozen=True)
class Repair(Finding):
    """A finding and what repairing it did; `ok` is False when the service refused. Its
    `as_dict` is the finding's, with `ok` and `result` after."""

    ok: bool
    result: str

    @classmethod
    def of(cls, finding: Finding, ok: bool, result: str) -> Repair:
        return cls(finding.kind, finding.object_id, finding.detail, ok, result)


def diagnose(*, limit: int = 100, now: datetime | None = None) -> list[Finding]:
    """Every finding, at most `limit` of each kind. Reads only."""
    now = now or timezone.now()
    return [finding for check in CHECKS for finding in check(limit, now)]


def repair(findings: list[Finding]) -> list[Repair]:
    """Repair each finding in its own transaction; a refusal is reported, not raised."""
    done = []
    for finding in findings:
        try:
            done.append(Repair.of(finding, True, REPAIRS[finding.kind](finding.object_id)))
        except AgentRunError as error:
            done.append(Repair.of(finding, False, error.message))
    return done
