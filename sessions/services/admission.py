"""Turn admission and steering: one turn at a time per session, decided atomically.

Every admission to a session runs under a transaction advisory lock on its id (seed
`admitSessionTurn`), then locks the active turn's run and command, then the session row
(the run → commands → session lock order of every other writer). Under those locks it
decides, from the current state and never from a client's stale view:

1. an idempotency key already used in the session replays that turn (200 `replayed`),
   writing a missing dispatch intent when an earlier attempt wrote the command without
   it (200 `recovered`), or the steer an earlier `when_busy=steer` attempt made (200
   `replayed`);
2. with a live active turn: the same request replays it; a turn whose runner lease
   expired is terminalised `infra-failed` and the new turn admitted; otherwise `when_busy`
   decides: `reject` (409 `session_busy`), `steer` (200 `steered`), `interrupt` (the
   active run is cancelled, 201 `interrupted_and_created`), `enqueue` (the turn is filed
   as a work-queue task in the session's lane through `sessions.turn_queue`, 200 `queued`
   with its task id and position; the scheduler admits queued turns one at a time, in
   order, as the session goes idle);
3. otherwise a new run and `turn` command (+ dispatch intent): 201 `created` — or, for
   `enqueue` while turns are already queued for the session, `queued` behind them.

An `expected_turn_id` that is not the active turn's command id is a 409 `stale_turn`.
The request and decision types are `sessions.turns`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from agentrun.errors import AgentRunError, conflict, not_found
from agentrun.hashing import stable_hash
from agentrun.locks import LockKey, advisory_xact_lock
from agentrun.row_inserts import collecting_inserts, pending_inserts
from agentrun.tenancy import Scope
from dispatch import intents
from dispatch.selectors import intent_of
from runs.locks import lock_command, lock_run, lock_run_commands
from runs.models import Command, CommandState, Run, RunStatus
from runs.phases import Phase
from runs.services.cancellation import cancel_run_locked
from runs.services.command_lifecycle import create_command_locked
from runs.services.event_log import PendingEvents
from runs.services.lifecycle import create_run_locked, run_fingerprint
from sessions.locks import lock_session
from sessions.models import Session
from sessions.projection import check_boundary
from sessions.services.stale import terminalize_stale_turn_locked, turn_is_stale
from sessions.session_writes import collecting_session_writes, pending_session_writes
from sessions.sql import read_session
from sessions.turn_queue import turn_queue
from sessions.turns import Admission, TurnRequest


@dataclass(frozen=True)
class ActiveTurn:
    run: Run
    command: Command
    session: Session
    commands: list[Command] | None = None  # all the run's, when locked (for a cancel)


def admit_turn(*, request: TurnRequest) -> Admission:
    """Admit a turn to a session, in its own (outermost) transaction. Locks: the session's
    admission lock, then those of `admit_turn_locked`. Errors: 409 `session_busy`,
    `stale_turn`, `session_boundary`, `idempotency_mismatch`."""
    with transaction.atomic(durable=True):
        advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, request.session_id)
        return admit_turn_locked(request=request)


def admit_turn_locked(*, request: TurnRequest) -> Admission:
    """`admit_turn` for a caller whose transaction already holds the session's admission
    lock (the queue scheduler, which looks at the session under that lock first). Locks:
    the active turn's run and command, the session row. The session row is written once
    and the events of every run it writes (the interrupted or stale turn's, the new
    turn's) are appended together, at the end, in that order."""
    observed = read_session(request.session_id)
    if observed is not None:
        check_boundary(
            observed,
            tenant_id=request.tenant_id,
            project_id=request.spec.project_id,
            backend=request.spec.backend_profile,
        )
    events = PendingEvents()
    # The new rows (run, command, intent) go in one statement at the end of the block:
    # the session row's UPDATE that points at them (when this block is the outermost of
    # both collectors: nothing runs between their ends), before their run's events.
    outermost = pending_session_writes() is None and pending_inserts() is None
    with collecting_session_writes() as sessions, collecting_inserts() as inserts:
        admission = _admit_locked(request, observed, events)
        if outermost:
            sessions.lead_with(inserts.take())
    events.append_locked()
    return admission


def _admit_locked(
    request: TurnRequest, observed: Session | None, events: PendingEvents
) -> Admission:
    replay = _replay_by_key(request, events)
    if replay is not None:
        return replay
    active = lock_active_turn(observed, all_commands=request.when_busy == "interrupt")
    _check_expected_turn(request.expected_turn_id, active)
    if active is not None:
        decided = _decide_busy(request, active, events)
        if decided is not None:
            return decided
    scope = Scope.tenant(request.tenant_id)
    if request.when_busy == "enqueue" and turn_queue().has_queued_turns(
        scope=scope, session_id=request.session_id
    ):
        return turn_queue().enqueue_turn_locked(request)  # behind the turns already waiting
    return _create_turn(request, events, session=active.session if active else None)


def lock_active_turn(observed: Session | None, *, all_commands: bool = False) -> ActiveTurn | None:
    """Lock the observed session's live active turn (run, command, then session row).
    `all_commands`: lock every command of the run (in seq order, in one statement), not
    only the active one, for a caller that may cancel the run: it locks them all anyway,
    and would otherwise lock the active one twice."""
    if observed is None or not observed.has_active_turn:
        return None
    if not observed.active_run_id or not observed.active_command_id:
        raise conflict(
            f"session {observed.session_id} has a half-written active turn",
            code="session_projection_invalid",
        )
    run = lock_run(observed.active_run_id)
    commands = lock_run_commands(run) if all_commands else None
    command = (
        _find_command(commands, observed.active_command_id)
        if commands is not None
        else lock_command(observed.active_command_id, run=run)
    )
    session = lock_session(observed.session_id)
    assert session is not None
    if (session.active_run_id, session.active_command_id) != (run.id, command.id):
        raise conflict(
            f"session {session.session_id} changed meanwhile; retry", code="session_changed"
        )
    if run.is_terminal or command.is_terminal:
        return None
    return ActiveTurn(run, command, session, commands)


def _find_command(commands: list[Command], command_id: str) -> Command:
    """The command `command_id` among a run's locked commands; 404 if it is not the run's
    (what `lock_command` raises)."""
    for command in commands:
        if command.id == command_id:
            return command
    raise not_found("command", command_id)


def _check_expected_turn(expected: str | None, active: ActiveTurn | None) -> None:
    actual = active.command.id if active else None
    if expected is not None and expected != actual:
        raise conflict(
            f"expected_turn_id {expected} is not the active turn ({actual or 'none'})",
            code="stale_turn",
            active_turn_id=actual,
        )


def _replay_by_key(request: TurnRequest, events: PendingEvents) -> Admission | None:
    if request.idempotency_key is None:
        return None
    found = (
        Command.objects.filter(
            run__session_ref__session_id=request.session_id, idempotency_key=request.idempotency_key
        )
        .order_by("-created_at")
        .values_list("id", "run_id")
        .first()
    )
    if found is None:
        return None
    run = lock_run(found[1])
    command = lock_command(found[0], run=run)
    if command.type == "steer":
        return _replay_steer(run, command, request)
    return replay_or_recover(run, command, request, events)


def _replay_steer(run: Run, command: Command, request: TurnRequest) -> Admission:
    """A retried `when_busy=steer` admission: the steer its key produced. The request's run
    spec and dispatch were not used by the steer, so only the payload must match."""
    if command.payload_hash != stable_hash(request.payload):
        raise conflict(
            f"idempotency key {request.idempotency_key!r} was used for a different steer",
            code="idempotency_mismatch",
            command_id=command.id,
        )
    return Admission("replayed", run, command)


def replay_or_recover(
    run: Run, command: Command, request: TurnRequest, events: PendingEvents
) -> Admission:
    """The same turn again: return it, writing its dispatch intent if an earlier attempt
    committed the command without it (seed `replayOrRecoverSessionTurnWithClient`)."""
    _check_same_turn(run, command, request)
    intent = intent_of(command)
    if intent is not None or request.dispatch is None:
        intents.check_intent_replay(command=command, intent=intent, request=request.dispatch)
        return Admission("replayed", run, command)
    if run.status != RunStatus.PENDING or run.claimed_by or command.state != CommandState.PENDING:
        raise busy(request.session_id, run, command)
    recovered = intents.record_intent_locked(run=run, command=command, request=request.dispatch)
    events.add(
        run,
        "backend_status",
        {
            "phase": Phase.RUNNER_DISPATCH_RECOVERED,
            "reason": "session-runner-admission-partial-write-recovered",
            "command_id": command.id,
            "dispatch_intent_id": recovered.id,
            "planned_runner_job_id": recovered.runner_job_id,
        },
    )
    return Admission("recovered", run, command)


def _check_same_turn(run: Run, command: Command, request: TurnRequest) -> None:
    same = (
        run_fingerprint(run) == request.spec.fingerprint(request.tenant_id)
        and (request.run_id is None or request.run_id == run.id)
        and command.type == "turn"
        and command.payload_hash == stable_hash(request.payload)
        and command.idempotency_key == request.idempotency_key
    )
    if not same:
        raise conflict(
            f"idempotency key {request.idempotency_key!r} was used for a different turn"
            if request.idempotency_key
            else "not the same turn",
            code="idempotency_mismatch",
            command_id=command.id,
        )


def _decide_busy(
    request: TurnRequest, active: ActiveTurn, events: PendingEvents
) -> Admission | None:
    """Replay, replace a stale turn, or apply `when_busy`. None means: admit a new turn."""
    try:
        return replay_or_recover(active.run, active.command, request, events)
    except AgentRunError as mismatch:
        if mismatch.code != "idempotency_mismatch":
            raise
    if turn_is_stale(active.run, now=timezone.now()):
        terminalize_stale_turn_locked(
            active.run, active.command, session=active.session, events=events
        )
        return None
    if request.when_busy == "steer":
        steer = _add_command(active.run, request, "steer", session=active.session, events=events)
        return Admission("steered", active.run, steer)
    if request.when_busy == "interrupt":
        outcome = cancel_run_locked(
            active.run,
            reason="interrupted by a new turn",
            requested_by=request.requested_by,
            session=active.session,
            events=events,
            commands=active.commands,
        )
        created = _create_turn(request, events, session=active.session)
        return Admission(
            "interrupted_and_created", created.run, created.command, outcome.cancel_request
        )
    if request.when_busy == "enqueue":
        return turn_queue().enqueue_turn_locked(request)
    raise busy(request.session_id, active.run, active.command)


def _create_turn(
    request: TurnRequest, events: PendingEvents, *, session: Session | None
) -> Admission:
    """A new run and its turn command. `session`: the session row if already locked."""
    created = create_run_locked(
        tenant_id=request.tenant_id, spec=request.spec, run_id=request.run_id, session=session
    )
    # A run this transaction inserted is its own (nobody else sees it before the commit);
    # a replayed reserved run id names an existing run, which must be locked.
    run = created.run if created.created else lock_run(created.run.id)
    command = _add_command(run, request, "turn", session=created.session or session, events=events)
    return Admission("created", created.run, command)


def _add_command(
    run: Run, request: TurnRequest, type: str, *, session: Session | None, events: PendingEvents
) -> Command:
    """The request's payload as a new `turn` (with the request's dispatch) or `steer` (with
    none: the active turn's runner takes it) command of the locked `run`."""
    return create_command_locked(
        run,
        type=type,
        payload=request.payload,
        idempotency_key=request.idempotency_key,
        dispatch=request.dispatch if type == "turn" else None,
        session=session,
        events=events,
    ).command


def busy(session_id: str, run: Run, command: Command) -> AgentRunError:
    """409 `session_busy`, naming the turn that holds the session."""
    holder = {"active_run_id": run.id, "active_turn_id": command.id, "run_status": run.status}
    message = f"session {session_id} is busy with turn {command.id}"
    return conflict(message, code="session_busy", **holder)
