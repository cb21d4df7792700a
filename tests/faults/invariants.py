"""The invariants every fault test (and the soak test) checks over the whole database.

1. No lost event: each run's event seqs are 1..n with no gap and no duplicate.
2. No duplicate dispatch: one intent per command, at most one runner job per intent (the
   intent's planned job), at most one `runner-dispatched` event per intent.
3. No run stuck: after the lease reaper has run, no run is claimed or running without a live
   lease, and lease rows match their runs.
4. Sessions agree with their runs: a session's active turn is its one live run; an idle or
   terminal session has no live run; its terminal status is its last run's.
5. The outbox (when on): one record per event, all delivered, and within a run in seq order.
6. The queue: a task has at most one live attempt; every attempt's run exists, and each
   run belongs to one attempt; a running task's run is live or its end is projected.

Each check is one SQL query returning the offending rows, so a violation names them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db import connection

from runs.services.reaper import reap_expired_leases

CHECKS: dict[str, str] = {
    "event seqs gap-free per run": """
        SELECT run_id FROM agentrun_events GROUP BY run_id
        HAVING min(seq) <> 1 OR max(seq) <> count(*) OR count(DISTINCT seq) <> count(*)""",
    "one runner job per intent": """
        SELECT i.id FROM agentrun_runner_dispatch_intents i
        JOIN agentrun_runner_jobs j ON j.run_id = i.run_id AND j.command_id = i.command_id
        GROUP BY i.id HAVING count(*) > 1""",
    "runner job is the intent's planned job": """
        SELECT i.id FROM agentrun_runner_dispatch_intents i
        WHERE i.state = 'dispatched' AND NOT EXISTS (
            SELECT 1 FROM agentrun_runner_jobs j
            WHERE j.id = i.actual_runner_job_id AND j.idempotency_key = i.runner_job_id)""",
    "one runner-dispatched event per intent": """
        SELECT payload->>'dispatch_intent_id' FROM agentrun_events
        WHERE type = 'backend_status' AND payload->>'phase' = 'runner-dispatched'
        GROUP BY 1 HAVING count(*) > 1""",
    "no live run without a live lease": """
        SELECT id FROM agentrun_runs
        WHERE status IN ('claimed', 'running')
          AND (claimed_by IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= now())""",
    "lease rows match their runs": """
        SELECT r.id FROM agentrun_runs r LEFT JOIN agentrun_leases l ON l.run_id = r.id
        WHERE (r.claimed_by IS NOT NULL AND r.status NOT IN
                 ('completed', 'failed', 'blocked', 'cancelled')) <> (l.run_id IS NOT NULL)
           OR (l.run_id IS NOT NULL AND (l.runner_id <> r.claimed_by
                                         OR l.lease_epoch <> r.lease_epoch))""",
    "terminal commands under terminal runs": """
        SELECT c.id FROM agentrun_commands c JOIN agentrun_runs r ON r.id = c.run_id
        WHERE r.status IN ('completed', 'failed', 'blocked', 'cancelled')
          AND c.state IN ('pending', 'acknowledged')""",
    "session active turn is its live run": """
        SELECT s.session_id FROM agentrun_sessions s
        LEFT JOIN agentrun_runs r ON r.id = s.active_run_id
        WHERE (s.active_run_id IS NOT NULL) <> (s.execution_state = 'running')
           OR (s.active_run_id IS NOT NULL AND (r.id IS NULL
               OR r.status IN ('completed', 'failed', 'blocked', 'cancelled')
               OR r.session_ref->>'session_id' <> s.session_id))""",
    "at most one live run per session, and it is the active one": """
        SELECT s.session_id FROM agentrun_sessions s
        JOIN agentrun_runs r ON r.session_ref->>'session_id' = s.session_id
        WHERE r.status NOT IN ('completed', 'failed', 'blocked', 'cancelled')
          AND EXISTS (SELECT 1 FROM agentrun_commands c WHERE c.run_id = r.id)
        GROUP BY s.session_id, s.active_run_id
        HAVING count(*) > 1 OR bool_or(r.id IS DISTINCT FROM s.active_run_id)""",
    "terminal session shows its last run's status": """
        SELECT s.session_id FROM agentrun_sessions s
        JOIN agentrun_runs r ON r.id = s.last_run_id
        WHERE s.execution_state = 'terminal'
          AND (s.terminal_status IS DISTINCT FROM r.status
               OR r.status NOT IN ('completed', 'failed', 'blocked', 'cancelled'))""",
    "at most one live attempt per task": """
        SELECT task_id FROM agentrun_queue_attempts WHERE state IN ('reserved', 'running')
        GROUP BY task_id HAVING count(*) > 1""",
    "each attempt's run exists and has one attempt": """
        SELECT a.run_id FROM agentrun_queue_attempts a
        LEFT JOIN agentrun_runs r ON r.id = a.run_id
        WHERE a.run_id IS NOT NULL
        GROUP BY a.run_id HAVING count(*) > 1 OR bool_or(r.id IS NULL)""",
    "every queue run has its attempt": """
        SELECT r.id FROM agentrun_runs r
        WHERE r.trace_sink->>'task_id' IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM agentrun_queue_attempts a WHERE a.run_id = r.id)""",
    "running task's attempt is running": """
        SELECT t.id FROM agentrun_queue_tasks t
        WHERE t.state = 'running' AND NOT EXISTS (
            SELECT 1 FROM agentrun_queue_attempts a
            WHERE a.task_id = t.id AND a.state = 'running')""",
}

OUTBOX_CHECKS: dict[str, str] = {
    "one outbox record per event": """
        SELECT e.id FROM agentrun_events e
        LEFT JOIN agentrun_kafka_event_outbox o ON o.event_id = e.id
        GROUP BY e.id HAVING count(o.id) <> 1""",
    "outbox delivered": """
        SELECT id FROM agentrun_kafka_event_outbox WHERE delivered_at IS NULL""",
    "outbox order follows run seq": """
        SELECT run_id FROM (
            SELECT run_id, source_seq,
                   lag(source_seq) OVER (PARTITION BY run_id ORDER BY outbox_seq) AS previous
            FROM agentrun_kafka_event_outbox) ordered
        WHERE previous IS NOT NULL AND previous >= source_seq""",
}


@dataclass
class Report:
    checked: Counter[str] = field(default_factory=Counter)
    violations: dict[str, list[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def total_violations(self) -> int:
        return sum(len(found) for found in self.violations.values())

    def summary(self) -> str:
        return (
            f"invariants checked: {len(self.checked)} over {self.rows}; "
            f"violations: {self.total_violations}"
            + (f" {self.violations}" if self.violations else "")
        )


def check_invariants(*, outbox: bool = False, reap: bool = True) -> Report:
    """Run the reaper (grace 0: every expired lease is a dead runner by now), then every
    check; returns the report (the caller asserts `total_violations == 0`)."""
    if reap:
        reap_expired_leases(limit=100_000, grace_ms=0)
    checks = {**CHECKS, **(OUTBOX_CHECKS if outbox else {})}
    report = Report()
    with connection.cursor() as cursor:
        for name, sql in checks.items():
            cursor.execute(sql)
            found = [str(row[0]) for row in cursor.fetchall()]
            report.checked[name] += 1
            if found:
                report.violations[name] = found[:20]
        for table in ("runs", "commands", "events", "sessions", "queue_tasks"):
            # Identifier from the fixed tuple above (identifiers cannot be parameters).
            cursor.execute(f"SELECT count(*) FROM agentrun_{table}")  # noqa: S608
            report.rows[table] = int(cursor.fetchone()[0])
    return report


def assert_invariants(*, outbox: bool = False, reap: bool = True) -> Report:
    report = check_invariants(outbox=outbox, reap=reap)
    print("\n" + report.summary())
    assert report.total_violations == 0, report.summary()
    return report
