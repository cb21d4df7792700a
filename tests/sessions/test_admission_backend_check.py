"""A turn's backend profile is checked in the statement that inserts its run (issue 18):
an unknown profile is still a 400 on `backend_profile`, and nothing of the turn remains."""

from __future__ import annotations

import pytest

from agentrun.errors import AgentRunError
from runs.models import Backend, Command, Run
from runs.services.lifecycle import RunSpec
from sessions.models import Session
from tests.builders import run_spec
from tests.sessions.helpers import admit

pytestmark = pytest.mark.django_db(transaction=True)


def spec_with(session_id: str, profile: str) -> RunSpec:
    return run_spec(backend_profile=profile, session_ref={"session_id": session_id, "metadata": {}})


def test_an_unknown_backend_profile_refuses_a_new_session_turn_and_leaves_nothing() -> None:
    with pytest.raises(AgentRunError) as refused:
        admit("s-nobackend", "hi", spec=spec_with("s-nobackend", "no-such-profile"), dispatch={})
    assert refused.value.http_status == 400 and refused.value.details["field"] == "backend_profile"
    assert not Run.objects.exists() and not Command.objects.exists()
    assert not Session.objects.filter(pk="s-nobackend").exists()


def test_a_deleted_backend_profile_refuses_an_interrupting_turn_and_keeps_the_active_one() -> None:
    first = admit("s-gone", "first", dispatch={})
    assert first.run is not None
    Backend.objects.filter(profile="scripted").delete()
    with pytest.raises(AgentRunError) as refused:
        admit("s-gone", "second", dispatch={}, when_busy="interrupt")
    assert refused.value.details["field"] == "backend_profile"
    assert list(Run.objects.values_list("id", "status")) == [(first.run.id, "pending")]
    assert Session.objects.get(pk="s-gone").active_run_id == first.run.id
