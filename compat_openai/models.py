"""What the Agents API knows of a session beyond agentrun's own row.

A session created through `/openai/v1/agents/sessions` is an agentrun session (its id,
tenant, project, backend and metadata live on `agentrun_sessions`) plus this profile: the
agent settings and environment the SDK sent, from which every turn's run spec is made,
and the deletion mark (the Agents API removes a session from its surface; agentrun keeps
the session's runs and events, so a delete only hides it here).
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from sessions.models import Session


class AgentSessionProfile(models.Model):
    session = models.OneToOneField(
        Session,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="openai_profile",
        db_column="session_id",
    )
    # The SDK's agent settings as accepted (model, instructions, reasoning, service_tier…).
    agent = models.JSONField(default=dict)
    # `{"type": "self_hosted", "workspace_directory": …, "capability_directories": […]}`.
    environment = models.JSONField(default=dict)
    # The agentrun execution policy every turn of this session runs with.
    execution_policy = models.JSONField(default=dict)
    # The SDK's metadata (16 string pairs). Not the session row's `metadata`, which agentrun
    # itself writes to (the backend's last turn id).
    metadata = models.JSONField(default=dict)
    review = models.TextField(default="none")
    prompt_cache_options = models.JSONField(null=True, blank=True)
    vault_ids = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_openai_sessions"

    def __str__(self) -> str:
        return self.session_id
