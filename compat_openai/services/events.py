"""`sessions.events.create`: the SDK's input events applied to an agentrun session, in order.

- a message is a turn admission with `when_busy=steer`: an idle session starts a turn
  (run + `turn` command + dispatch intent), a session with a live turn gets a steer;
- a cancel cancels the active turn (nothing when there is none: the receipt says so);
- an approval answer decides the pending approval it names (`runs` approvals service).

With an `Idempotency-Key`, event *i* of the request is admitted under the key `<key>` (the
first) or `<key>.<i>`: a retried request replays the turns and steers the first one made
(turn admission's own replay, SPEC §2) instead of making new ones, even after the first
attempt's turn has ended. Each event is its own transaction (admission's locks are per
session); the request is validated whole before the first is applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrun.errors import invalid, not_found
from agentrun.tenancy import Scope
from compat_openai.actions import Action, ApprovalAnswer, Cancel, Message
from compat_openai.models import AgentSessionProfile
from compat_openai.selectors import live_profile
from runs.control_models import Approval
from runs.models import Command
from runs.services import approvals
from runs.services.lifecycle import RunSpec
from sessions.services import admission, steering
from sessions.turns import TurnRequest

PROVIDER_ID = "openai-agents-api"
KEY_MAX = 190  # room for the `.<i>` suffix under the 200-character id limit


@dataclass(frozen=True)
class Receipt:
    """What one event did: `created` / `steered` / `replayed` (a message), `cancelled` or
    `nothing_to_cancel` (a cancel), `approved` / `denied` (an answer)."""

    type: str
    disposition: str
    turn_id: str | None = None
    run_id: str | None = None
    cancel_request_id: str | None = None


def turn_spec(profile: AgentSessionProfile) -> RunSpec:
    """The run spec of every turn of the session: its project and backend, the
    environment's workspace, the profile's execution policy."""
    session = profile.session
    return RunSpec(
        project_id=session.project_id,
        workspace_ref={"path": profile.environment["workspace_directory"]},
        provider_id=PROVIDER_ID,
        backend_profile=session.backend_profile,
        execution_policy=profile.execution_policy,
        session_ref={
            "session_id": session.session_id,
            "conversation_id": None,
            "metadata": {},
            "expires_at": None,
        },
    )


def check_key(key: str | None) -> str | None:
    if key is not None and (not key or len(key) > KEY_MAX or not key.isprintable()):
        raise invalid(
            f"Idempotency-Key: 1 to {KEY_MAX} printable characters", field="Idempotency-Key"
        )
    return key


def submit_events(
    *,
    session_id: str,
    scope: Scope,
    actions: list[Action],
    idempotency_key: str | None,
    requested_by: str,
) -> list[Receipt]:
    """Apply the events in order. Errors: 404 (another tenant's or a deleted session);
    409 `idempotency_mismatch` (a key reused for different input), `session_boundary`."""
    profile = live_profile(session_id=session_id, scope=scope)
    check_key(idempotency_key)
    receipts = []
    for index, action in enumerate(actions):
        key = None if idempotency_key is None else _key(idempotency_key, index)
        receipts.append(_apply(profile, scope, action, key, requested_by))
    return receipts


def _key(key: str, index: int) -> str:
    return key if index == 0 else f"{key}.{index}"


def _apply(
    profile: AgentSessionProfile, scope: Scope, action: Action, key: str | None, by: str
) -> Receipt:
    if isinstance(action, Message):
        return _message(profile, action, key, by)
    if isinstance(action, Cancel):
        return _cancel(profile, scope, by)
    return answer_approval(profile=profile, answer=action, requested_by=by)


def _message(profile: AgentSessionProfile, message: Message, key: str | None, by: str) -> Receipt:
    session = profile.session
    result = admission.admit_turn(
        request=TurnRequest(
            session_id=session.session_id,
            tenant_id=session.tenant_id,
            spec=turn_spec(profile),
            payload=message.payload,
            idempotency_key=key,
            dispatch={},
            when_busy="steer",
            requested_by=by,
        )
    )
    turn = _turn_of(result.run.id if result.run else None, result.command)
    return Receipt(
        "agent.session.input.message",
        result.disposition,
        turn_id=turn,
        run_id=result.run.id if result.run else None,
    )


def _turn_of(run_id: str | None, command: Any) -> str | None:
    """The turn a command belongs to: a turn command is its own turn; a steer belongs to
    its run's turn (one turn per run under session admission)."""
    if command is None or command.type == "turn":
        return command.id if command is not None else None
    first = Command.objects.filter(run_id=run_id, type="turn").order_by("seq").first()
    return first.id if first else None


def _cancel(profile: AgentSessionProfile, scope: Scope, by: str) -> Receipt:
    outcome = steering.cancel_session(
        session_id=profile.pk,
        scope=scope,
        reason="cancelled through the Agents API",
        requested_by=by,
    )
    if outcome is None:
        return Receipt("agent.session.input.cancel", "nothing_to_cancel")
    request = outcome.cancel_request
    return Receipt(
        "agent.session.input.cancel",
        "cancelled" if outcome.changed else "already_cancelling",
        run_id=outcome.run.id,
        cancel_request_id=request.id if request is not None else None,
    )


def answer_approval(
    *, profile: AgentSessionProfile, answer: ApprovalAnswer, requested_by: str
) -> Receipt:
    """A person's answer to a pending approval of the session (`runs` approvals: the first
    answer wins; the same again replays; another one is a 409 `approval_decided`). The
    SDK's `cancel` (dismiss the request) is a deny: agentrun's backends must be told one
    or the other. Errors: 404 an approval of another session."""
    approval = Approval.objects.filter(pk=answer.request_id, session_id=profile.pk).first()
    if approval is None:
        raise not_found("approval", answer.request_id)
    decision = "deny" if answer.decision == "cancel" else answer.decision
    result = approvals.answer_approval(
        run_id=approval.run_id,
        approval_id=approval.id,
        decision=decision,
        reason="dismissed through the Agents API" if answer.decision == "cancel" else None,
        decided_by=requested_by,
    )
    return Receipt(
        "agent.session.input.mcp_approval_request_result",
        result.approval.state if result.changed else "replayed",
        turn_id=result.approval.command_id,
        run_id=result.approval.run_id,
    )
