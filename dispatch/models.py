"""Runner dispatch intents (seed `agentrun_runner_dispatch_intents`, migrations 012, 013).

An intent is written in the same transaction as the command that asks to be dispatched,
so a committed command that wants a runner always has one. Workers claim due intents
with SKIP LOCKED and a lease; (id, lease_owner, attempt_count) is the fencing token of a
claim. Open states are `pending`, `retry` and `dispatching`; `dispatched`, `failed` and
`cancelled` are final.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from agentrun.model_bases import Leased, TextIdModel, Timestamped, partial_index
from runs.models import Command, Run


class IntentState(models.TextChoices):
    PENDING = "pending"
    DISPATCHING = "dispatching"
    RETRY = "retry"
    DISPATCHED = "dispatched"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A tuple: the claim index's condition uses it, and a migration keeps its order.
OPEN_INTENT_STATES = (IntentState.PENDING, IntentState.RETRY, IntentState.DISPATCHING)
# What the claim takes by due time; a `dispatching` intent is taken again only once its
# lease has expired, found by its own index (`dispatch.locks`, migration 0006).
CLAIMABLE_INTENT_STATES = (IntentState.PENDING, IntentState.RETRY)


class RunnerDispatchIntent(Leased, TextIdModel, Timestamped):
    # No index of its own: `agentrun_rdi_run_state_idx` leads with run_id and serves the
    # run's lookups and cascades (issue 18, migration 0005).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="dispatch_intents", db_index=False
    )
    command = models.OneToOneField(
        Command, on_delete=models.CASCADE, related_name="dispatch_intent"
    )
    kind = models.TextField(default="runner-job")
    input = models.JSONField(default=dict)
    input_hash = models.TextField()
    state = models.TextField(choices=IntentState.choices, default=IntentState.PENDING)
    runner_job_id = models.TextField(help_text="The runner job id planned for this intent.")
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.JSONField(null=True, blank=True)
    dispatch_outcome = models.TextField(null=True, blank=True)
    actual_runner_job_id = models.TextField(null=True, blank=True)
    active_runner_id = models.TextField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "agentrun_runner_dispatch_intents"
        indexes = [
            # The claim's hot path: only intents waiting for a claim, by due time. Terminal
            # rows (most of the table over time) are not in it, nor claimed ones: a claim
            # walked every in-flight intent's entry, and under a pinned snapshot every dead
            # one, twice per intent (migration 0006).
            partial_index(
                "next_attempt_at",
                "created_at",
                where=models.Q(state__in=CLAIMABLE_INTENT_STATES),
                name="agentrun_rdi_due_idx",
            ),
            # Claimed intents by lease expiry: what the claim's rescue looks for. The lease in
            # the predicate too, so that only a query on the lease can use it: a settle's
            # `state = 'dispatching'` alone matched it, and read every claimed intent.
            partial_index(
                "lease_expires_at",
                where=models.Q(state=IntentState.DISPATCHING, lease_expires_at__isnull=False),
                name="agentrun_rdi_lease_idx",
            ),
            models.Index(fields=["run", "state"], name="agentrun_rdi_run_state_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_INTENT_STATES
