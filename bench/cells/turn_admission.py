"""Cell 9: session turn admission, 8 threads over 100 sessions.

agentrun: `sessions.services.admission.admit_turn` with `when_busy=interrupt` on 100
sessions that always have an active turn, so every admission is a whole new turn: the
active run is cancelled (cancel request, command and intent fenced, lease dropped, five
events) and a new run, `turn` command and dispatch intent are created (three events), all
in one transaction under the session's admission lock. Each thread picks sessions at
random (seeded), so two threads sometimes queue on one session's lock, as clients do.

Reference (a limit): the same rows written by hand in raw SQL through psycopg, one
transaction per admission with the same locks in the same order (admission advisory lock,
run, command, session, the session-version lock) and one statement per table touched
(events of each run in one multi-row INSERT, one NOTIFY per run).

The ledger reads sessions and runs back: every acknowledged admission's run exists with
its command and intent (else lost); no run exists that nobody was told about (duplicate);
per session exactly one live run, and it is the last one admitted (else an order
violation).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from psycopg.types.json import Jsonb

from agentrun.errors import AgentRunError
from agentrun.hashing import stable_hash
from agentrun.ids import new_id
from bench import fixtures
from bench.harness import (
    CellReport,
    Figure,
    Ledger,
    Sample,
    Scale,
    compare,
)
from bench.profiling import print_summary, profiled
from bench.queries import captured
from bench.worker_threads import WorkerResult, run_workers
from runs.services.event_log import RUN_CHANGE_CHANNEL
from sessions.services.admission import admit_turn
from sessions.turns import TurnRequest

SESSIONS, THREADS = 100, 8


def request(session_id: str, text: str, when_busy: str = "interrupt") -> TurnRequest:
    return TurnRequest(
        session_id=session_id,
        tenant_id=fixtures.BENCH_TENANT,
        spec=fixtures.run_spec(session_id),
        payload={"text": text},
        when_busy=when_busy,
        dispatch={},
    )


def busy_sessions(count: int) -> tuple[list[str], set[str]]:
    """`count` sessions, each with an admitted (active) turn; returns ids and first runs."""
    ids, runs = [], set()
    for _ in range(count):
        session_id = new_id("ses")
        runs.add(admit_turn(request=request(session_id, "first turn", "reject")).run.id)
        ids.append(session_id)
    return ids, runs


# --- agentrun side -------------------------------------------------------------------


def service_step(sessions: list[str]) -> tuple[Callable, Callable]:
    def prepare(index: int) -> Any:
        connection.ensure_connection()
        return index, random.Random(index)

    def step(state: Any, op: int, result: WorkerResult) -> None:
        thread, rng = state
        session_id = rng.choice(sessions)
        started = _now()
        try:
            admitted = admit_turn(request=request(session_id, f"turn {thread}-{op}"))
        except AgentRunError as refused:  # e.g. session_changed under a race: not admitted
            result.latencies_ms.append((_now() - started) * 1000)
            result.errors_refused = getattr(result, "errors_refused", 0) + 1  # type: ignore[attr-defined]
            _ = refused
            return
        result.latencies_ms.append((_now() - started) * 1000)
        result.done += 1
        result.acknowledged.append(admitted.run.id)

    return prepare, step


# --- reference side: the same writes in raw SQL --------------------------------------

_EVENT_ROW = "(%s, %s, %s, %s, %s, %s)"
_INSERT_EVENTS = "INSERT INTO agentrun_events (id, run_id, seq, type, payload, created_at) VALUES "
_OPEN = ("pending", "retry", "dispatching")


def raw_admit(conn: Any, session_id: str, text: str) -> str:
    """Interrupt the session's active turn and admit a new one: one transaction."""
    x = conn.execute
    reason = "interrupted by a new turn"
    x(
        "SELECT pg_advisory_xact_lock(hashtext('agentrun-session-turn-admission'), hashtext(%s))",
        [session_id],
    )
    now = datetime.now(UTC)  # under the lock, as the service: created_at follows lock order
    old_run, old_cmd = x(
        "SELECT active_run_id, active_command_id FROM agentrun_sessions WHERE session_id = %s",
        [session_id],
    ).fetchone()
    x("SELECT status FROM agentrun_runs WHERE id = %s FOR UPDATE", [old_run])
    x("SELECT state FROM agentrun_commands WHERE id = %s FOR UPDATE", [old_cmd])
    x("SELECT version FROM agentrun_sessions WHERE session_id = %s FOR UPDATE", [session_id])
    cancel_id = new_id("cancel")
    x(
        "INSERT INTO agentrun_cancel_requests (id, target_kind, target_id, run_id, command_id,"
        " session_id, reason, epoch, stage, metadata, created_at, updated_at) VALUES"
        " (%s, 'run', %s, %s, NULL, %s, %s, 1, 'terminalized', '{}', %s, %s)",
        [cancel_id, old_run, old_run, session_id, reason, now, now],
    )
    x(
        "UPDATE agentrun_runs SET status = 'cancelled', terminal_status = 'cancelled',"
        " failure_kind = 'cancelled', failure_message = %s, cancel_epoch = cancel_epoch + 1,"
        " cancel_request_id = %s, cancel_requested_at = %s, cancel_reason = %s,"
        " claimed_by = NULL, lease_expires_at = NULL, updated_at = %s WHERE id = %s",
        [reason, cancel_id, now, reason, now, old_run],
    )
    x(
        "UPDATE agentrun_commands SET state = 'cancelled', cancel_epoch = cancel_epoch + 1,"
        " cancel_request_id = %s, cancel_requested_at = %s, cancel_reason = %s, updated_at = %s"
        " WHERE run_id = %s AND state NOT IN ('completed', 'failed', 'cancelled')",
        [cancel_id, now, reason, now, old_run],
    )
    x(
        "UPDATE agentrun_runner_dispatch_intents SET state = 'cancelled', lease_owner = NULL,"
        " lease_expires_at = NULL, last_error = %s, updated_at = %s"
        " WHERE run_id = %s AND state = ANY(%s)",
        [Jsonb({"reason": reason, "fenced": True}), now, old_run, list(_OPEN)],
    )
    x("DELETE FROM agentrun_leases WHERE run_id = %s", [old_run])
    last = x(
        "SELECT coalesce(max(seq), 0) FROM agentrun_events WHERE run_id = %s", [old_run]
    ).fetchone()[0]
    phases = [
        "cancel-accepted",
        "cancel-persisted",
        "command-terminal",
        None,
        "cancel-terminalized",
    ]
    _insert_events(
        conn,
        old_run,
        last,
        [
            ("terminal_status", {"terminal_status": "cancelled", "message": reason})
            if phase is None
            else ("backend_status", {"phase": phase, "cancel_request_id": cancel_id})
            for phase in phases
        ],
        now,
    )
    run_id, command_id = new_id("run"), new_id("cmd")
    spec = fixtures.run_spec(session_id)
    x(
        "INSERT INTO agentrun_runs (id, tenant_id, project_id, workspace_ref, session_ref,"
        " provider_id, backend_profile, execution_policy, status, created_at, updated_at,"
        " lease_epoch, cancel_epoch) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'pending', %s, %s,"
        " 0, 0)",
        [
            run_id,
            fixtures.BENCH_TENANT,
            spec.project_id,
            Jsonb(spec.workspace_ref),
            Jsonb(spec.session_ref),
            spec.provider_id,
            spec.backend_profile,
            Jsonb(spec.execution_policy),
            now,
            now,
        ],
    )
    payload = {"text": text}
    x(
        "INSERT INTO agentrun_commands (id, run_id, seq, type, payload, payload_hash, state,"
        " created_at, updated_at, cancel_epoch) VALUES (%s, %s, 1, 'turn', %s, %s, 'pending',"
        " %s, %s, 0)",
        [command_id, run_id, Jsonb(payload), stable_hash(payload), now, now],
    )
    x(
        "INSERT INTO agentrun_runner_dispatch_intents (id, run_id, command_id, kind, input,"
        " input_hash, state, attempt_count, runner_job_id, next_attempt_at, created_at,"
        " updated_at) VALUES (%s, %s, %s, 'runner-job', '{}', %s, 'pending', 0, %s, %s, %s, %s)",
        [new_id("rdi"), run_id, command_id, stable_hash({}), new_id("rjob"), now, now, now],
    )
    _insert_events(
        conn,
        run_id,
        0,
        [
            ("user_message", {"text": text, "command_id": command_id}),
            ("backend_status", {"phase": "run-created", "run_id": run_id}),
            ("backend_status", {"phase": "command-created", "command_id": command_id}),
        ],
        now,
    )
    x(
        "SELECT pg_advisory_xact_lock_shared(hashtext('agentrun-session-version'),"
        " hashtext('global'))"
    )
    x(
        "UPDATE agentrun_sessions SET version = nextval('agentrun_session_version_seq'),"
        " execution_state = 'running', last_run_id = %s, last_command_id = %s,"
        " active_run_id = %s, active_command_id = %s, terminal_status = NULL,"
        " failure_kind = NULL, last_event_seq = 3, last_activity_at = %s, updated_at = %s"
        " WHERE session_id = %s",
        [run_id, command_id, run_id, command_id, now, now, session_id],
    )
    x(
        "SELECT pg_notify(%s, %s), pg_notify(%s, %s)",
        [RUN_CHANGE_CHANNEL, old_run, RUN_CHANGE_CHANNEL, run_id],
    )
    conn.commit()
    return run_id


def _insert_events(
    conn: Any, run_id: str, last: int, items: list[tuple[str, dict[str, Any]]], now: datetime
) -> None:
    params: list[Any] = []
    for offset, (kind, body) in enumerate(items, start=1):
        params += [new_id("evt"), run_id, last + offset, kind, Jsonb(body), now]
    conn.execute(_INSERT_EVENTS + ",".join([_EVENT_ROW] * len(items)), params)


def raw_step(sessions: list[str]) -> tuple[Callable, Callable, Callable]:
    def prepare(index: int) -> Any:
        return fixtures.raw_connect(), index, random.Random(index)

    def step(state: Any, op: int, result: WorkerResult) -> None:
        conn, thread, rng = state
        session_id = rng.choice(sessions)
        started = _now()
        run_id = raw_admit(conn, session_id, f"turn {thread}-{op}")
        result.latencies_ms.append((_now() - started) * 1000)
        result.done += 1
        result.acknowledged.append(run_id)

    return prepare, step, lambda state: state[0].close()


def _now() -> float:
    import time

    return time.perf_counter()


# --- ledger and figures --------------------------------------------------------------


def admission_ledger(sessions: list[str], first: set[str], results: list[WorkerResult]) -> Ledger:
    acked = {run_id for r in results for run_id in r.acknowledged}
    with fixtures.raw_connect() as conn:
        runs = conn.execute(
            "SELECT r.session_ref->>'session_id', r.id, r.status, r.created_at,"
            " (SELECT count(*) FROM agentrun_commands c WHERE c.run_id = r.id),"
            " (SELECT count(*) FROM agentrun_runner_dispatch_intents i WHERE i.run_id = r.id)"
            " FROM agentrun_runs r WHERE r.session_ref->>'session_id' = ANY(%s)",
            [sessions],
        ).fetchall()
        active = dict(
            conn.execute(
                "SELECT session_id, active_run_id FROM agentrun_sessions"
                " WHERE session_id = ANY(%s)",
                [sessions],
            ).fetchall()
        )
    complete = {run_id for _, run_id, _, _, commands, intents in runs if commands and intents}
    ledger = Ledger(expected=len(acked), seen=len(acked & complete))
    ledger.lost = len(acked - complete)
    ledger.duplicates = len({r[1] for r in runs} - acked - first)
    latest: dict[str, tuple[Any, str]] = {}
    live: dict[str, int] = {}
    for session_id, run_id, status, created_at, _, _ in runs:
        if session_id not in latest or created_at > latest[session_id][0]:
            latest[session_id] = (created_at, run_id)
        if status not in ("completed", "failed", "blocked", "cancelled"):
            live[session_id] = live.get(session_id, 0) + 1
    for session_id in sessions:
        if live.get(session_id) != 1 or active.get(session_id) != latest[session_id][1]:
            ledger.order_violations += 1
    refused = sum(getattr(r, "errors_refused", 0) for r in results)
    if refused:
        ledger.notes.append(f"{refused} admissions refused with a domain error")
    return ledger


def admission_sample(
    kind: str, *, seconds: float, ready: tuple[list[str], set[str]] | None = None
) -> Callable[[], Sample]:
    def run() -> Sample:
        sessions, first = ready or busy_sessions(SESSIONS)
        if kind == "agentrun":
            prepare, step = service_step(sessions)
            finish: Callable = lambda _s: fixtures.close_django_connection()  # noqa: E731
        else:
            prepare, step, finish = raw_step(sessions)
        results, elapsed = run_workers(THREADS, prepare, step, seconds=seconds, finish=finish)
        ledger = admission_ledger(sessions, first, results)
        latencies = [x for r in results for x in r.latencies_ms]
        return Sample(sum(r.done for r in results), elapsed, ledger, latencies)

    return run


def query_counts() -> dict[str, Any]:
    sessions, _ = busy_sessions(1)
    fresh = new_id("ses")
    return {
        "admit_created": captured(lambda: admit_turn(request=request(fresh, "a", "reject"))),
        "admit_interrupt": captured(lambda: admit_turn(request=request(sessions[0], "b"))),
        "admit_steer": captured(lambda: admit_turn(request=request(sessions[0], "c", "steer"))),
        "admit_reject_busy": captured(lambda: _refused(request(sessions[0], "d", "reject"))),
    }


def _refused(turn: TurnRequest) -> None:
    with contextlib.suppress(AgentRunError):
        admit_turn(request=turn)


def run(scale: Scale) -> CellReport:
    report = CellReport()
    report.data["queries"] = query_counts()
    counts = {name: q["count"] for name, q in report.data["queries"].items()}
    report.note(f"statements per admission (BEGIN/COMMIT included): {counts}")
    seconds = scale.pick(0.8, 5.0)
    figure = Figure(
        "9.admit.interrupt",
        f"turn admission (when_busy=interrupt), {THREADS} threads over {SESSIONS} sessions",
        "agentrun",
        admission_sample("agentrun", seconds=seconds),
        "raw-sql",
        admission_sample("raw", seconds=seconds),
        params={"threads": THREADS, "sessions": SESSIONS, "when_busy": "interrupt"},
        unit="admissions/s",
        reference_kind="limit",
        goal=(">=", 0.4),  # issue 18
    )
    report.outcomes.append(compare(figure))
    if scale.profile:
        secs = scale.pick(3, 8)
        ready = busy_sessions(SESSIONS)
        with profiled("admission-service-8t", seconds=secs, focus="service_step") as summary:
            admission_sample("agentrun", seconds=secs + 1, ready=ready)()
        print_summary(summary)
        report.data["profile"] = summary
    return report
