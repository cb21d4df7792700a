"""Sessions through the real `openai` SDK: create, retrieve, update, list, delete, and the
SDK's own typed errors for bad input, another tenant's session and a busy session."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.auth import issue_api_key
from compat_openai.models import AgentSessionProfile
from sessions.models import Session
from tests.compat_openai.world import ENVIRONMENT, openai

pytestmark = pytest.mark.django_db(transaction=True)


def test_create_retrieve_update_list_delete(sdk: Any) -> None:
    client = sdk(project="proj-sdk")
    created = client.beta.agents.sessions.create(
        environment=ENVIRONMENT, agent={"model": "scripted"}, metadata={"team": "blue"}
    )
    assert created.object == "agent.session" and created.id.startswith("sess_")
    assert (created.status, created.metadata, created.agent.model) == (
        "idle",
        {"team": "blue"},
        "scripted",
    )
    assert created.environment.type == "self_hosted"
    assert created.environment.workspace_directory == ENVIRONMENT["workspace_directory"]
    row = Session.objects.get(pk=created.id)
    assert (row.tenant_id, row.project_id, row.backend_profile) == (
        "tenant-sdk",
        "proj-sdk",
        "scripted",
    )

    other = client.beta.agents.sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    updated = client.beta.agents.sessions.update(created.id, metadata={"team": "red"})
    assert updated.metadata == {"team": "red"}
    assert client.beta.agents.sessions.retrieve(created.id).metadata == {"team": "red"}

    listed = [s.id for s in client.beta.agents.sessions.list()]
    assert listed == [other.id, created.id]  # newest first
    assert [s.id for s in client.beta.agents.sessions.list(order="asc", limit=1)] == [
        created.id,
        other.id,
    ]  # the SDK's auto-pagination follows `after`
    filtered = client.beta.agents.sessions.list(metadata={"team": "red"})
    assert [s.id for s in filtered] == [created.id]
    assert list(client.beta.agents.sessions.list(agent_id="agent_codex")) == []
    assert len(list(client.beta.agents.sessions.list(agent_id=created.agent.id))) == 2

    deleted = client.beta.agents.sessions.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (
        created.id,
        True,
        "agent.session.deleted",
    )
    with pytest.raises(openai.NotFoundError):
        client.beta.agents.sessions.retrieve(created.id)
    assert AgentSessionProfile.objects.get(pk=created.id).deleted_at is not None
    assert [s.id for s in client.beta.agents.sessions.list()] == [other.id]


def test_bad_input_is_the_sdks_bad_request_error_naming_the_field(sdk: Any) -> None:
    client = sdk()
    sessions = client.beta.agents.sessions
    cases = [
        ({"environment": {"type": "openai_hosted"}, "agent": {"model": "scripted"}}, "type"),
        ({"environment": ENVIRONMENT, "agent": {"model": "no-such-model"}}, "agent.model"),
        ({"environment": ENVIRONMENT}, "agent"),
        ({"environment": ENVIRONMENT, "agent_id": "agent_1"}, "agent_id"),
        (
            {
                "environment": ENVIRONMENT,
                "agent": {"model": "scripted"},
                "metadata": {f"k{i}": "v" for i in range(17)},
            },
            "metadata",
        ),
        (
            {
                "environment": ENVIRONMENT,
                "agent": {"model": "scripted"},
                "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}],
            },
            "events[0].input[0].content[0].type",
        ),
    ]
    for arguments, param in cases:
        with pytest.raises(openai.BadRequestError) as raised:
            sessions.create(**arguments)
        assert raised.value.status_code == 400
        assert raised.value.param is not None and param in raised.value.param, raised.value.body
        assert raised.value.type == "invalid_request_error"
    assert not Session.objects.exists()  # nothing half-written

    made = sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    with pytest.raises(openai.BadRequestError) as raised:
        sessions.events.create(made.id, events=[{"type": "agent.session.input.bogus"}])
    assert "events[0].type" in (raised.value.param or "")
    with pytest.raises(openai.BadRequestError):
        sessions.events.create(
            made.id,
            events=[
                {
                    "type": "agent.session.input.message",
                    "input": [{"role": "user", "content": [{"type": "input_text", "text": "ok"}]}],
                },
                {
                    "type": "agent.session.input.tool_result",
                    "call_id": "c",
                    "turn_id": "t",
                    "success": True,
                },
            ],
        )
    assert client.beta.agents.sessions.turns.list(made.id).data == []  # the first not applied


def test_another_tenants_session_is_the_sdks_not_found_error(sdk: Any) -> None:
    mine = sdk("tenant-one").beta.agents.sessions
    theirs = sdk("tenant-two").beta.agents.sessions
    session = mine.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    attempts = [
        lambda: theirs.retrieve(session.id),
        lambda: theirs.update(session.id, metadata={"x": "y"}),
        lambda: theirs.delete(session.id),
        lambda: theirs.events.create(session.id, events=[{"type": "agent.session.input.cancel"}]),
        lambda: theirs.turns.list(session.id),
        lambda: theirs.items.list(session.id),
        lambda: theirs.events.stream(session.id),
    ]
    for attempt in attempts:
        with pytest.raises(openai.NotFoundError) as raised:
            attempt()
        assert raised.value.code == "not_found"
    assert list(theirs.list()) == []
    assert mine.retrieve(session.id).metadata == {}


def test_an_unknown_key_is_the_sdks_authentication_error(live_server: Any) -> None:
    client = openai.OpenAI(
        api_key="not-a-key", base_url=f"{live_server.url}/openai/v1", max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        client.beta.agents.sessions.list()


def test_initial_input_starts_a_turn_and_a_model_of_another_backend_is_a_conflict(
    sdk: Any,
) -> None:
    sessions = sdk("tenant-input").beta.agents.sessions
    session = sessions.create(
        environment=ENVIRONMENT, agent={"model": "scripted"}, input="first words"
    )
    assert session.status == "in_progress"
    [turn] = sessions.turns.list(session.id).data
    assert turn.status == "queued" and turn.agent_id == "agent_scripted"
    [item] = sessions.turns.items.list(turn.id, session_id=session.id).data
    assert (item.role, item.content[0].text) == ("user", "first words")
    assert Session.objects.get(pk=session.id).title == "first words"
    with pytest.raises(openai.ConflictError) as raised:
        sessions.update(session.id, agent={"model": "gpt-5.1-codex"})
    assert raised.value.code == "session_boundary"


def test_an_operator_key_writes_in_the_organization_it_names(live_server: Any) -> None:
    secret = issue_api_key(tenant_id="ops", role="operator").secret
    base = f"{live_server.url}/openai/v1"
    named = openai.OpenAI(api_key=secret, base_url=base, organization="tenant-op", max_retries=0)
    made = named.beta.agents.sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    assert Session.objects.get(pk=made.id).tenant_id == "tenant-op"
    unnamed = openai.OpenAI(api_key=secret, base_url=base, max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        unnamed.beta.agents.sessions.create(environment=ENVIRONMENT, agent={"model": "scripted"})
    assert raised.value.param == "tenant_id"
    assert [s.id for s in unnamed.beta.agents.sessions.list()] == [made.id]  # every tenant
