"""Agents API sessions: create, update, delete (`client.beta.agents.sessions`).

A create writes the agentrun session row (a server-made `sess_…` id, the key's tenant,
the project of the `OpenAI-Project` header, the backend `agent.model` names) and its
profile in one transaction; the initial `input`, if any, is then submitted like any
message event. A delete hides the session from this surface (its runs and events stay in
agentrun) and is refused while a turn is active: the SDK's own rule, cancel first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentrun.errors import conflict, not_found
from agentrun.ids import new_id
from agentrun.locks import LockKey, advisory_xact_lock
from agentrun.tenancy import Scope
from compat_openai.agents import backend_for_model, policy_for
from compat_openai.locks import lock_profile
from compat_openai.models import AgentSessionProfile
from sessions.locks import lock_or_insert_session, lock_session
from sessions.models import Session
from sessions.versions import next_session_version


@dataclass(frozen=True)
class NewSession:
    tenant_id: str
    project_id: str
    agent: dict[str, Any]
    environment: dict[str, Any]
    metadata: dict[str, str]
    review: str = "none"
    prompt_cache_options: dict[str, Any] | None = None
    execution_policy: dict[str, Any] | None = None


def create_session(*, new: NewSession) -> AgentSessionProfile:
    """A new session and its profile. Errors: 400 an unknown model or a refused choice."""
    backend = backend_for_model(new.agent["model"])
    policy = policy_for(new.agent, backend, new.execution_policy)
    now = timezone.now()
    with transaction.atomic(durable=True):
        session, _ = lock_or_insert_session(
            Session(
                session_id=new_id("sess"),
                tenant_id=new.tenant_id,
                project_id=new.project_id,
                backend_profile=backend.profile,
                version=next_session_version(),
                created_at=now,
                updated_at=now,
            )
        )
        return AgentSessionProfile.objects.create(
            session=session,
            agent=new.agent,
            environment=new.environment,
            execution_policy=policy,
            metadata=new.metadata,
            review=new.review,
            prompt_cache_options=new.prompt_cache_options,
            created_at=now,
        )


def _locked(session_id: str, scope: Scope) -> tuple[Session, AgentSessionProfile]:
    session = scope.require(lock_session(session_id), kind="session", object_id=session_id)
    profile = lock_profile(session_id)
    if profile is None:
        raise not_found("session", session_id)
    return session, profile


def update_session(*, session_id: str, scope: Scope, changes: dict[str, Any]) -> None:
    """Apply a `sessions.update`: metadata replaces the session's; agent settings change
    the policy of later turns. Errors: 404; 400 a refused choice; 409 a model of another
    backend (a session belongs to one backend)."""
    with transaction.atomic(durable=True):
        session, profile = _locked(session_id, scope)
        agent = {**profile.agent, **changes.get("agent", {})}
        if "reasoning" in changes.get("agent", {}):
            agent["reasoning"] = {**(profile.agent.get("reasoning") or {}), **agent["reasoning"]}
        backend = backend_for_model(agent["model"])
        if backend.profile != session.backend_profile:
            raise conflict(
                f"agent.model: {agent['model']!r} runs on {backend.profile!r}; this session "
                f"belongs to {session.backend_profile!r}",
                code="session_boundary",
            )
        profile.agent = agent
        profile.execution_policy = policy_for(agent, backend, _extension(profile))
        for name in ("review", "prompt_cache_options", "metadata"):
            if name in changes:
                setattr(profile, name, changes[name] if name != "metadata" else changes[name] or {})
        profile.save()
        # A visible change of the session: the change feed (`version`) shows it.
        session.version = next_session_version()
        session.updated_at = timezone.now()
        session.save(update_fields=["version", "updated_at"])


def _extension(profile: AgentSessionProfile) -> dict[str, Any]:
    """The policy keys the agent settings do not own (those came from the extension)."""
    owned = {"model", "developer_instructions", "reasoning_effort", "reasoning_summary"}
    return {k: v for k, v in profile.execution_policy.items() if k not in owned}


def delete_session(*, session_id: str, scope: Scope) -> None:
    """Hide the session from this surface. Errors: 404; 409 `session_busy` while a turn is
    active (cancel it first). Locks: the admission lock, so no turn starts meanwhile."""
    with transaction.atomic(durable=True):
        advisory_xact_lock(LockKey.SESSION_TURN_ADMISSION, session_id)
        session, profile = _locked(session_id, scope)
        if session.has_active_turn:
            raise conflict(
                f"session {session_id} has an active turn: cancel it before deleting",
                code="session_busy",
                active_turn_id=session.active_command_id,
            )
        profile.deleted_at = timezone.now()
        profile.save(update_fields=["deleted_at"])
