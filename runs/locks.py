"""Row locks of the runs app.

Lock order, everywhere: the run row first, then its command rows (by seq), then the
session row (sessions app). Every helper must be called inside the service's transaction;
the locks are held until it commits. One exception, a whole write in one statement: a
runner's heartbeat (`extend_live_lease`, at the end). `no_key=True` is not used:
finishing and cancelling change columns that other writers read under the same lock, and
the seed takes plain `FOR UPDATE`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from agentrun.errors import not_found
from agentrun.prepared_sql import (
    GENERIC_PLANS,
    INDEX_PLANS,
    Prepared,
    default_connection,
    execute_hot,
    execute_hot_sets,
    prepared,
)
from agentrun.raw_sql import (
    Params,
    model_columns,
    models_from_rows,
    read_models,
    select_models_sql,
)
from runs.control_models import Approval, ApprovalState
from runs.models import TERMINAL_COMMAND_STATES, TERMINAL_RUN_STATUSES, Command, Run, RunnerJob
from runs.sql import text_array


def lock_run(run_id: str) -> Run:
    """`SELECT … FOR UPDATE` the run; 404 if it does not exist. Serialises all run writes.

    Raw SQL (`agentrun.raw_sql.read_models`): every run write starts here (an append, a
    heartbeat, a finish), and the ORM's compilation of this one statement was ~0.4 ms of
    CPU per call, as much as the rest of an append (bench cell 1, issue 18)."""
    found = read_models(Run, _LOCK_ONE, [run_id])
    if not found:
        raise not_found("run", run_id)
    return found[0]


# What a runner's append reads of its run: the claim and cancel columns (the fences,
# `runs.services.fencing`), the tenant and session (the session touch, the outbox's
# partition key and CloudEvent, the webhook deliveries) and the backend profile (the API's
# token count). `lock_run_for_append` reads only those; the rest of the row (three JSON
# documents, the outcome and the timestamps) is deferred: read by a query on access, as
# `QuerySet.defer` leaves a field, under the same lock. Decoding the whole row was about a
# third of the lock's CPU (bench cell 1, issue 18).
APPEND_READS = (
    "id",
    "tenant_id",
    "session_ref",
    "backend_profile",
    "status",
    "claimed_by",
    "lease_epoch",
    "cancel_epoch",
    "cancel_request_id",
)
_APPEND_DEFERRED = tuple(
    field.name for field in Run._meta.concrete_fields if field.name not in APPEND_READS
)


def lock_run_for_append(run_id: str, *, key_digest: str | None = None) -> Run:
    """`lock_run` (or, with `key_digest`, `lock_run_for_runner_key`) for a runner's append:
    the same statement and lock, the row read as far as the append reads it (`APPEND_READS`;
    any other field is loaded on access). 404 or `KeyDoesNotHoldRun` as those."""
    if key_digest is None:
        found = read_models(Run, _LOCK_ONE, [run_id], deferred=_APPEND_DEFERRED, hot="run_lock")
        if not found:
            raise not_found("run", run_id)
    else:
        found = read_models(
            Run,
            _LOCK_FOR_KEY,
            [run_id, key_digest],
            deferred=_APPEND_DEFERRED,
            hot="run_lock_for_key",
        )
        if not found:
            raise KeyDoesNotHoldRun(run_id)
    return found[0]


class KeyDoesNotHoldRun(Exception):
    """`lock_run_for_runner_key` found no run that the key may write: the run is missing or
    the key is unknown, revoked, expired or another run's. Nothing was written; the caller
    authenticates the ordinary way to answer which (a 401, 404 or 429)."""


def lock_run_for_runner_key(run_id: str, *, key_digest: str) -> Run:
    """`lock_run`, in the same statement checking that `key_digest` is a live runner key of
    this very run (not revoked, not expired, same tenant); `KeyDoesNotHoldRun` otherwise,
    whether the run is missing or the key does not hold it. Saves the runner's hot write
    the key lookup's round trip (bench cell 2, issue 18) without caching keys: a revocation
    committed before this statement starts is seen, as by the ordinary lookup, which also
    ran before the lock wait (a run's terminal transaction revokes its keys and ends it, and
    an ended run refuses the write: `runs.services.fencing`). Only the run row is locked:
    the key is read in a subquery, not joined."""
    found = read_models(Run, _LOCK_FOR_KEY, [run_id, key_digest])
    if not found:
        raise KeyDoesNotHoldRun(run_id)
    return found[0]


# The key's conditions are `ApiKeyAuthentication`'s (live, not revoked) and its scope (role
# runner, this run, this tenant).
_KEY_HOLDS_RUN = (
    " AND EXISTS (SELECT 1 FROM agentrun_api_keys k WHERE k.key_digest = %s"
    " AND k.role = 'runner' AND k.run_id = agentrun_runs.id"
    " AND k.tenant_id = agentrun_runs.tenant_id AND k.revoked_at IS NULL"
    " AND (k.expires_at IS NULL OR k.expires_at > now()))"
)
_LOCK_ONE = "WHERE id = %s FOR UPDATE"
_LOCK_FOR_KEY = f"WHERE id = %s{_KEY_HOLDS_RUN} FOR UPDATE"


def lock_runs(run_ids: list[str]) -> dict[str, Run]:
    """Lock several runs in one statement, in id order (so that two batches over the same
    runs queue instead of deadlocking); 404 if one does not exist. For batch settles; raw,
    as `lock_run` (the ORM's compilation cost more than the round trip: bench cell 3).
    Read as far as an append reads a run (`APPEND_READS`, the rest loaded on access): a
    dispatch settle checks the runs' status and appends to them, and decoding the rest of
    ten rows was a sixth of its Python CPU with the commands' (bench cell 3, issue 18)."""
    wanted = sorted(set(run_ids))
    locked = read_models(
        Run, "WHERE id = ANY(%s) ORDER BY id FOR UPDATE", [wanted], deferred=_APPEND_DEFERRED
    )
    runs = {run.id: run for run in locked}
    for run_id in wanted:
        if run_id not in runs:
            raise not_found("run", run_id)
    return runs


def lock_run_commands(run: Run) -> list[Command]:
    """Lock every command of a locked run, in seq order (finish and cancel touch them all).
    Raw, as `lock_run`: an interrupting turn admission locks them (bench cell 9)."""
    return read_models(Command, "WHERE run_id = %s ORDER BY seq FOR UPDATE", [run.id])


def lock_command(command_id: str, *, run: Run) -> Command:
    """Lock one command of an already locked run; 404 if it is not that run's."""
    command = Command.objects.select_for_update().filter(pk=command_id, run=run).first()
    if command is None:
        raise not_found("command", command_id)
    return command


def lock_commands(command_ids: list[str]) -> dict[str, Command]:
    """Lock several commands of already locked runs in one statement, in (run, seq) order;
    404 if one does not exist. The caller checks that each belongs to the run it locked.
    For batch settles, which read states, not what a command says: `payload` (a turn's
    whole text) is deferred, not decoded. Raw, as `lock_runs`."""
    wanted = sorted(set(command_ids))
    locked = read_models(
        Command,
        "WHERE id = ANY(%s) ORDER BY run_id, seq FOR UPDATE",
        [wanted],
        deferred=("payload",),
    )
    commands = {command.id: command for command in locked}
    for command_id in wanted:
        if command_id not in commands:
            raise not_found("command", command_id)
    return commands


@dataclass(frozen=True)
class LockedCommand:
    """What a batch settle reads of a command it locked: whose it is and its state."""

    id: str
    run_id: str
    state: str

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_COMMAND_STATES


# `lock_runs`' and `lock_commands`' statements, the same rows locked in the same order; the
# commands read as far as a batch settle reads them (`LockedCommand`).
_LOCK_RUNS_TAIL = "WHERE id = ANY(%s::text[]) ORDER BY id FOR UPDATE"
_LOCK_COMMAND_STATES = prepared(
    "lock_command_states",
    "SELECT id, run_id, state FROM agentrun_commands"
    " WHERE id = ANY(%s::text[]) ORDER BY run_id, seq FOR UPDATE",
)


@cache
def _lock_runs_statement() -> Prepared:
    """Built on first use: the model's columns are read when the apps are ready."""
    return prepared("lock_runs", select_models_sql(Run, _LOCK_RUNS_TAIL, deferred=_APPEND_DEFERRED))


@dataclass(frozen=True)
class LockedRunsAndCommands:
    runs: dict[str, Run]
    commands: dict[str, LockedCommand]
    then: list[list[tuple[Any, ...]]]  # the rows of each of the caller's `then` statements


def lock_runs_and_commands(
    run_ids: list[str], command_ids: list[str], *, then: Sequence[tuple[Prepared, Params]] = ()
) -> LockedRunsAndCommands:
    """`lock_runs`, then the commands' locks as `lock_commands` takes them, then the
    caller's `then` statements (which may rely on every lock), in one round trip: the
    statements go in one simple-query string (`agentrun.prepared_sql.execute_hot_sets`),
    which PostgreSQL runs in order, so every run is locked before the first command and
    both before `then`, as with a round trip each. For batch settles
    (`dispatch.services.claims`), which read a command's state, nothing else: the commands
    are not read into models (their timestamps' decoding and `from_db` were a tenth of a
    dispatch batch's Python CPU; bench cell 3, issue 18). 404 if a run or a command does
    not exist (raised after `then` ran: the caller's transaction rolls it back); the
    caller checks that each command belongs to its run. The ids are bound as array
    literals (one quoted string each, as `runs.sql.insert_events`). As the first statement
    of a service's outermost block (a batch settle's), the string also carries the
    transaction's BEGIN: a round trip less per batch, where each cost its client ~0.1-0.15
    ms of CPU (issue 18, bench cell 3).

    Prepared, as a runner's append is (from a connection's second settle on, `EXECUTE`),
    with generic plans priced with indexes only (`agentrun.prepared_sql`'s `GENERIC_PLANS`,
    `INDEX_PLANS`, set for the rest of the transaction): planning these statements, the
    caller's write and the events statement on every batch was a quarter of the server's
    time per dispatched item (bench cell 3 through Celery, issue 18's ninth round,
    `pg_stat_statements`). A generic plan locks in the same order as a custom one: each
    lock's `ORDER BY` sits under its `FOR UPDATE`, so the rows are locked as sorted
    whatever the scan."""
    db = default_connection()
    wanted_runs, wanted_commands = sorted(set(run_ids)), sorted(set(command_ids))
    run_rows, command_rows, *after = execute_hot_sets(
        db,
        [
            (_lock_runs_statement(), [text_array(wanted_runs)]),
            (_LOCK_COMMAND_STATES, [text_array(wanted_commands)]),
            *then,
        ],
        begins=True,
        before=INDEX_PLANS + GENERIC_PLANS,
    )
    locked = models_from_rows(Run, run_rows, deferred=_APPEND_DEFERRED, db=db)
    runs = {run.id: run for run in locked}
    commands = {row[0]: LockedCommand(*row) for row in command_rows}
    for run_id in wanted_runs:
        if run_id not in runs:
            raise not_found("run", run_id)
    for command_id in wanted_commands:
        if command_id not in commands:
            raise not_found("command", command_id)
    return LockedRunsAndCommands(runs, commands, after)


def lock_run_of_command(command_id: str) -> Run:
    """Lock the run a command belongs to (the run lock comes before any command lock)."""
    run_id = Command.objects.filter(pk=command_id).values_list("run_id", flat=True).first()
    if run_id is None:
        raise not_found("command", command_id)
    return lock_run(run_id)


def lock_runner_job(runner_job_id: str) -> RunnerJob:
    """Lock a runner job row for a read-modify-write of its result."""
    job = RunnerJob.objects.select_for_update().filter(pk=runner_job_id).first()
    if job is None:
        raise not_found("runner job", runner_job_id)
    return job


def lock_run_unless_busy(run_id: str) -> Run | None:
    """Lock the run with SKIP LOCKED: None when it is gone or another transaction holds it.

    For the lease reaper: a run somebody is writing right now (a heartbeat, an append) is
    alive enough to leave for the next pass, so the reaper never waits behind a runner.
    """
    return Run.objects.select_for_update(skip_locked=True).filter(pk=run_id).first()


def lock_approval(approval_id: str, *, run: Run) -> Approval:
    """Lock one approval of an already locked run (run, then approval); 404 if it is not
    that run's."""
    approval = Approval.objects.select_for_update().filter(pk=approval_id, run=run).first()
    if approval is None:
        raise not_found("approval", approval_id)
    return approval


def lock_pending_approvals(run: Run, *, command_id: str | None = None) -> list[Approval]:
    """Lock a locked run's pending approvals (of one command, if given), oldest first."""
    pending = Approval.objects.select_for_update().filter(run=run, state=ApprovalState.PENDING)
    if command_id is not None:
        pending = pending.filter(command_id=command_id)
    return list(pending.order_by("created_at", "id"))


# --- a runner's heartbeat, one statement ----------------------------------------------
#
# Why raw: every live run's runner heartbeats each third of its lease, a steady write load
# that grows with the runs in flight; written with the ORM it was six round trips (BEGIN,
# the run's lock, three UPDATEs, COMMIT), each statement compiled again. A heartbeat that
# holds the live claim is this one statement, autocommitted. Its run UPDATE takes the
# run's row lock and checks the fence under it (READ COMMITTED re-reads a row another
# transaction changed and re-checks the WHERE on its latest version, as `FOR UPDATE`
# does); the lease and the runner row come after it, in the lock order, because both
# read what it returned. A heartbeat that does not hold the claim (another epoch, another
# runner, an ended run, no run) matches no row and writes nothing: the service then takes
# the locked path, which records the refusal or answers with the ended run.
_HEARTBEAT_SQL = """\
WITH beat AS (
  UPDATE agentrun_runs
  SET lease_expires_at = %(expires_at)s::timestamptz, updated_at = %(now)s::timestamptz
  WHERE id = %(run_id)s::text AND lease_epoch = %(lease_epoch)s::int
    AND claimed_by = %(runner_id)s::text AND status <> ALL(%(terminal)s::text[])
  RETURNING {columns}
),
lease AS (
  UPDATE agentrun_leases
  SET lease_expires_at = %(expires_at)s::timestamptz, updated_at = %(now)s::timestamptz
  WHERE run_id = (SELECT id FROM beat)
),
runner AS (
  UPDATE agentrun_runners SET heartbeat_at = %(now)s::timestamptz
  WHERE id = %(runner_id)s::text AND tenant_id = (SELECT tenant_id FROM beat)
)
SELECT * FROM beat"""
_TERMINAL = sorted(TERMINAL_RUN_STATUSES)


@cache
def _heartbeat() -> Prepared:
    return prepared("heartbeat", _HEARTBEAT_SQL.format(columns=model_columns(Run)))


def extend_live_lease(
    *, run_id: str, runner_id: str, lease_epoch: int, expires_at: datetime, now: datetime
) -> Run | None:
    """Extend the live claim's lease to `expires_at` in one autocommitted statement (see
    above): the run as written, or None when `runner_id` at `lease_epoch` does not hold a
    live claim of the run (nothing written). Its own transaction when the caller has
    none (a runner's heartbeat has none: `runs.services.lifecycle.heartbeat_run`)."""
    params = {
        "run_id": run_id,
        "runner_id": runner_id,
        "lease_epoch": lease_epoch,
        "expires_at": expires_at,
        "now": now,
        "terminal": _TERMINAL,
    }
    db = default_connection()
    rows = execute_hot(db, _heartbeat(), params)
    return models_from_rows(Run, rows, db=db)[0] if rows else None
