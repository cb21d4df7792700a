"""An approval through the real `openai` SDK (SPEC §9.3 under §9.6): the scripted backend
asks, the stream says `agent.session.requires_action` and the session shows the request
as an `mcp_approval_request`, the answer goes in as an SDK input event, the turn completes
with what the approval allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.control_models import Approval
from tests.compat_openai.world import (
    ENVIRONMENT,
    client_for,
    dispatch_to,
    message,
    openai,
    server_url,
    until_idle,
)
from tests.runtime.server import Server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("settled")]


def _answer(request_id: str, decision: str) -> dict[str, object]:
    return {
        "type": "agent.session.input.mcp_approval_request_result",
        "request_id": request_id,
        "response": {"type": "mcp_tool_call", "decision": decision},
    }


def test_an_approval_is_required_answered_through_the_sdk_and_the_turn_completes(
    server: Server, tmp_path: Path
) -> None:
    client = client_for(server_url(server), "tenant-approve")
    sessions = client.beta.agents.sessions
    session = sessions.create(
        environment=ENVIRONMENT,
        agent={"model": "scripted"},
        extra_body={"execution_policy": {"approval_policy": "ask"}},
    )
    events = sessions.events.stream(session.id)
    asking = {"mode": "ask", "command": "touch built.txt"}
    sessions.events.create(session.id, events=[message("make it", scripted=asking)])
    assert dispatch_to(server_url(server), tmp_path) == 1
    seen = []
    for event in events:
        seen.append(event)
        if event.type == "agent.session.requires_action":
            break
    [action] = seen[-1].session.required_actions
    assert seen[-1].session.status == "requires_action"
    assert (action.type, action.request.name, action.request.message) == (
        "mcp_approval_request",
        "command",
        "run: touch built.txt",
    )
    shown = sessions.retrieve(session.id)
    assert shown.status == "requires_action" and shown.required_actions[0].request_id == (
        action.request_id
    )
    turn = sessions.turns.retrieve(action.turn_id, session_id=session.id)
    assert turn.status == "waiting"

    receipt = sessions.events.with_raw_response.create(
        session.id, events=[_answer(action.request_id, "approve")]
    ).http_response.json()["events"][0]
    assert receipt["disposition"] == "approved"
    rest = until_idle(events)
    kinds = [e.type for e in rest]
    assert kinds[0] == "agent.session.in_progress" and kinds[-1] == "agent.session.idle"
    assert "agent.session.turn.completed" in kinds
    answer = [e for e in rest if e.type == "agent.session.turn.item.done"][-1].item
    assert answer.content[0].text == "Echo: make it ran: touch built.txt"
    approval = Approval.objects.get(pk=action.request_id)
    assert (approval.state, approval.decided_by is not None) == ("approved", True)

    # The same answer again replays; another one is the SDK's ConflictError.
    again = sessions.events.with_raw_response.create(
        session.id, events=[_answer(action.request_id, "approve")]
    ).http_response.json()["events"][0]
    assert again["disposition"] == "replayed"
    with pytest.raises(openai.ConflictError) as raised:
        sessions.events.create(session.id, events=[_answer(action.request_id, "deny")])
    assert raised.value.code == "approval_decided"
    with pytest.raises(openai.NotFoundError):
        sessions.events.create(session.id, events=[_answer("apr_not_this_sessions", "deny")])
    assert sessions.retrieve(session.id).required_actions == []
