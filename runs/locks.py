"""Row locks of the runs app.

Lock order, everywhere: the run row first, then its command rows (by seq), then the
session row (sessions app). Every helper must be called inside the service's transaction;
the locks are held until it commits. `no_key=True` is not used: finishing and cancelling
change columns that other writers read under the same lock, and the seed takes plain
`FOR UPDATE`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection

from agentrun.errors import not_found
from runs.control_models import Approval, ApprovalState
from runs.models import Command, Run, RunnerJob


def lock_run(run_id: str) -> Run:
    """`SELECT … FOR UPDATE` the run; 404 if it does not exist. Serialises all run writes.

    Raw SQL, read into a model with `Run.from_db`: every run write starts here (an append,
    a heartbeat, a finish), and the ORM's compilation of this one statement was ~0.4 ms of
    CPU per call, as much as the rest of an append (bench cell 1, issue 18)."""
    run = _locked_run(_run_row_shape()[0], [run_id])
    if run is None:
        raise not_found("run", run_id)
    return run


def _locked_run(sql: str, params: list[str]) -> Run | None:
    _, names, converters = _run_row_shape()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for index, convert in converters:
        values[index] = convert(values[index], None, connection)
    return Run.from_db(connection.alias, names, values)


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
    run = _locked_run(_run_lock_for_key_sql(), [run_id, key_digest])
    if run is None:
        raise KeyDoesNotHoldRun(run_id)
    return run


@cache
def _run_lock_for_key_sql() -> str:
    """The run lock's statement with the runner key's conditions of `ApiKeyAuthentication`
    (live, not revoked) and its scope (role runner, this run, this tenant) as an EXISTS."""
    holds = (
        " AND EXISTS (SELECT 1 FROM agentrun_api_keys k WHERE k.key_digest = %s"
        " AND k.role = 'runner' AND k.run_id = agentrun_runs.id"
        " AND k.tenant_id = agentrun_runs.tenant_id AND k.revoked_at IS NULL"
        " AND (k.expires_at IS NULL OR k.expires_at > now()))"
    )
    sql = _run_row_shape()[0]
    assert sql.endswith(" FOR UPDATE") and ' FROM "agentrun_runs" ' in sql
    return sql.removesuffix(" FOR UPDATE") + holds + " FOR UPDATE"


@cache
def _run_row_shape() -> tuple[str, list[str], list[tuple[int, Any]]]:
    """The run lock's statement, its columns' attribute names and the fields' converters
    from the database value (the JSON columns arrive as text)."""
    fields = Run._meta.concrete_fields
    columns = ", ".join(connection.ops.quote_name(str(field.column)) for field in fields)
    table = connection.ops.quote_name(Run._meta.db_table)
    # Column and table names come from the model, never from input.
    sql = f"SELECT {columns} FROM {table} WHERE id = %s FOR UPDATE"  # noqa: S608
    converters = [
        (index, field.from_db_value)
        for index, field in enumerate(fields)
        if hasattr(field, "from_db_value")
    ]
    return sql, [field.attname for field in fields], converters


def lock_runs(run_ids: list[str]) -> dict[str, Run]:
    """Lock several runs in one statement, in id order (so that two batches over the same
    runs queue instead of deadlocking); 404 if one does not exist. For batch settles."""
    wanted = sorted(set(run_ids))
    locked = Run.objects.select_for_update().filter(pk__in=wanted).order_by("id")
    runs = {run.id: run for run in locked}
    for run_id in wanted:
        if run_id not in runs:
            raise not_found("run", run_id)
    return runs


def lock_run_commands(run: Run) -> list[Command]:
    """Lock every command of a locked run, in seq order (finish and cancel touch them all)."""
    return list(Command.objects.select_for_update().filter(run=run).order_by("seq"))


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
    whole text) is deferred, not decoded."""
    wanted = sorted(set(command_ids))
    locked = (
        Command.objects.select_for_update()
        .filter(pk__in=wanted)
        .defer("payload")
        .order_by("run_id", "seq")
    )
    commands = {command.id: command for command in locked}
    for command_id in wanted:
        if command_id not in commands:
            raise not_found("command", command_id)
    return commands


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
