"""API keys: who may call agentrun, for which tenant, in which role."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from agentrun.model_bases import TextIdModel


class ApiKeyRole(models.TextChoices):
    CLIENT = "client"  # the own tenant's runs, sessions and tasks
    RUNNER = "runner"  # one run: claim, heartbeat, commands, ack, events, finish
    OPERATOR = "operator"  # all tenants and the status endpoints


class ApiKey(TextIdModel):
    """A bearer key. Only its SHA-256 digest is stored; the key is shown once at creation."""

    name = models.TextField(blank=True, default="")
    tenant_id = models.TextField()
    role = models.TextField(choices=ApiKeyRole.choices)
    run_id = models.TextField(
        null=True, blank=True, help_text="The one run a runner key may touch."
    )
    key_prefix = models.TextField(help_text="The first characters of the key, to recognise it.")
    key_digest = models.TextField(unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Runner keys end with their run (revoked in its terminal transaction) and, at the
    # latest, here; null = no expiry (client and operator keys).
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_api_keys"
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(role="runner") | models.Q(run_id__isnull=False),
                name="agentrun_api_keys_runner_has_run",
            )
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.role}, {self.tenant_id})"

    @property
    def is_operator(self) -> bool:
        return self.role == ApiKeyRole.OPERATOR

    @property
    def is_runner(self) -> bool:
        return self.role == ApiKeyRole.RUNNER
