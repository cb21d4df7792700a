"""The data half of adopting an original database: camelCase jsonb keys, payload hashes and
sequences, converted in batches that survive a large table and a restart.

The original wrote its records' JSON with camelCase keys (`session_ref.sessionId`,
`trace_sink.taskId`, `latest_attempt.attemptId`, event payloads' `commandId`, …); ours are
snake_case. Each step below rewrites the *top-level* keys of some jsonb columns of one
table (nested objects are the client's or the agent's own data and stay as written), one
batch of rows per transaction, in primary-key order. The step's last key is saved with
the batch (table `agentrun_adoption_progress`, created only by an adoption), so a re-run
(`manage.py migrate` again, or `manage.py adopt_database`) continues where it stopped.

Stored payload hashes are recomputed in our format from the stored values (a command's
payload, a task's spec, a dispatch intent's input), so an old idempotency key replays
instead of answering 409, and the queue's integrity check holds. Runner jobs keep
theirs: the caller chose what was hashed. Last, the version and outbox sequences
continue after the highest stored value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from agentrun.hashing import stable_hash
from dispatch.models import RunnerDispatchIntent
from ops import adoption_sql as sql
from queues.models import QueueAttempt, QueueTask
from queues.services.tasks import spec_of
from runs.models import Command

REFS = ("workspace_ref", "session_ref", "resource_bundle_ref", "execution_policy")


@dataclass(frozen=True)
class Step:
    """One table's conversion: its jsonb `columns` get snake_case keys, then `rehash`
    (alias, after, upto) recomputes the batch's hashes; batches go in `key` order."""

    name: str
    table: str
    key: str
    columns: tuple[str, ...] = ()
    rehash: Callable[[str, str, str], int] | None = field(default=None, compare=False)


def _rehash_commands(alias: str, after: str, upto: str) -> int:
    changed = []
    commands = Command.objects.using(alias).filter(pk__gt=after, pk__lte=upto)
    for command in commands.only("payload_hash", "payload"):
        wanted = stable_hash(command.payload)
        if command.payload_hash != wanted:
            command.payload_hash = wanted
            changed.append(command)
    Command.objects.using(alias).bulk_update(changed, ["payload_hash"])
    return len(changed)


def _rehash_tasks(alias: str, after: str, upto: str) -> int:
    changed = 0
    for task in QueueTask.objects.using(alias).filter(pk__gt=after, pk__lte=upto):
        wanted = spec_of(task).fingerprint(task.tenant_id)
        if task.payload_hash != wanted:
            # A task's attempts carry the task's hash (queues.services.transitions).
            attempts = QueueAttempt.objects.using(alias).filter(task=task)
            attempts.filter(payload_hash=task.payload_hash).update(payload_hash=wanted)
            QueueTask.objects.using(alias).filter(pk=task.pk).update(payload_hash=wanted)
            changed += 1
    return changed


def _rehash_intents(alias: str, after: str, upto: str) -> int:
    changed = 0
    intents = RunnerDispatchIntent.objects.using(alias).filter(pk__gt=after, pk__lte=upto)
    for intent in intents.only("input", "input_hash"):
        wanted = stable_hash(intent.input)
        if intent.input_hash != wanted:
            RunnerDispatchIntent.objects.using(alias).filter(pk=intent.pk).update(input_hash=wanted)
            changed += 1
    return changed


STEPS = (
    Step("runs", "agentrun_runs", "id", (*REFS, "trace_sink")),
    Step("commands", "agentrun_commands", "id", rehash=_rehash_commands),
    Step("events", "agentrun_events", "id", ("payload",)),
    Step("runners", "agentrun_runners", "id", ("metadata",)),
    Step("runner_jobs", "agentrun_runner_jobs", "id", ("result",)),
    Step("cancel_requests", "agentrun_cancel_requests", "id", ("metadata",)),
    Step("backends", "agentrun_backends", "profile", ("capabilities", "capacity", "health")),
    Step("sessions", "agentrun_sessions", "session_id", ("summary",)),
    Step("queue_tasks", "agentrun_queue_tasks", "id", (*REFS, "latest_attempt"), _rehash_tasks),
    Step(
        "dispatch_intents",
        "agentrun_runner_dispatch_intents",
        "id",
        ("input", "last_error"),
        _rehash_intents,
    ),
)
# Sequence, table, column: each sequence continues after the column's highest value.
SEQUENCES = (
    ("agentrun_session_version_seq", "agentrun_sessions", "version"),
    ("agentrun_queue_version_seq", "agentrun_queue_tasks", "version"),
    ("agentrun_kafka_event_outbox_seq", "agentrun_kafka_event_outbox", "outbox_seq"),
)
SEQUENCES_STEP = "sequences"


def plan_conversion(connection: BaseDatabaseWrapper) -> None:
    """Record the steps still to do (in the adoption's transaction)."""
    with connection.cursor() as cursor:
        cursor.execute(sql.CREATE_PROGRESS)
        for name in [step.name for step in STEPS] + [SEQUENCES_STEP]:
            cursor.execute(sql.ADD_STEP, [name])


def pending_steps(connection: BaseDatabaseWrapper) -> dict[str, str]:
    """Step name → last key done, for the unfinished steps ({} when nothing was adopted)."""
    with connection.cursor() as cursor:
        if not sql.rows(cursor, sql.TABLE_EXISTS, [sql.PROGRESS_TABLE])[0][0]:
            return {}
        return dict(sql.rows(cursor, sql.PENDING_STEPS))


def convert(
    connection: BaseDatabaseWrapper,
    *,
    batch_size: int = 1_000,
    max_batches: int | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> bool:
    """Run the pending steps, one batch per transaction; True when all are done.
    `max_batches` stops early (an operator's time box; a test's interruption)."""
    pending = pending_steps(connection)
    budget = max_batches
    for step in STEPS:
        if step.name not in pending:
            continue
        last = pending[step.name]
        while budget is None or budget > 0:
            if budget is not None:
                budget -= 1
            last, done = _batch(connection, step, last, batch_size)
            if done:
                log(f"adopted {step.table}")
                break
        else:
            return False
    if SEQUENCES_STEP in pending:
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            for sequence, table, column in SEQUENCES:
                if sql.rows(cursor, sql.TABLE_EXISTS, [table])[0][0]:
                    cursor.execute(sql.continue_sequence(sequence, table, column))
            cursor.execute(sql.ADVANCE_STEP, ["", True, 0, SEQUENCES_STEP])
        log("sequences continue after the stored values")
    return True


def _batch(connection: BaseDatabaseWrapper, step: Step, last: str, size: int) -> tuple[str, bool]:
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        (upto,) = sql.rows(cursor, sql.batch_end(step.table, step.key), [last, size])[0]
        if upto is None:
            cursor.execute(sql.ADVANCE_STEP, [last, True, 0, step.name])
            return last, True
        changed = 0
        if step.columns:
            cursor.execute(sql.convert_keys(step.table, step.key, step.columns), [last, upto])
            changed += max(cursor.rowcount, 0)
        if step.rehash is not None:
            changed += step.rehash(connection.alias, last, upto)
        cursor.execute(sql.ADVANCE_STEP, [upto, False, changed, step.name])
        return upto, False
