"""A small world with a row in every table the admin shows, made through the real services.

`build_world` needs a transactional test (`django_db(transaction=True)`): the dispatch and
outbox claims compare due times with the database's `now()`, which inside a test-wide
transaction would stay at the test's start.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Group
from django.db import connection
from django.test import override_settings
from pytest_django.fixtures import Settings as SettingsWrapper

from agentrun.auth import issue_api_key
from agentrun.tenancy import Scope
from compat_openai.services.sessions import NewSession, create_session
from dispatch.models import RunnerDispatchIntent
from dispatch.services.launch import dispatch_batch
from outbox.kafka import DeliveryFailure
from outbox.models import KafkaEventOutbox
from outbox.services.relay import claim_outbox_records, settle_outbox_records
from queues.models import QueueTask
from runs.models import Command, Run
from runs.services.approvals import ApprovalRequest, request_approval
from runs.services.cancellation import cancel_run
from runs.services.event_log import NewEvent, append_runner_events
from runs.services.lifecycle import claim_run
from runs.services.quotas import set_tenant_quota
from runs.services.runners import register_runner
from sessions.models import Session
from tests.builders import make_run
from tests.dispatch.helpers import FailingLauncher, RecordingLauncher, make_dispatch_command
from tests.queues.helpers import file_task, schedule
from tests.sessions.helpers import admit
from webhooks.services.endpoints import create_endpoint

RUNNER = "runner-op-1"


def quiet_settings(settings: SettingsWrapper) -> None:
    """No on-commit wake-ups (no broker in these tests); the outbox on, its broker never
    contacted (nothing here relays through Kafka); backoffs long enough to stay waiting."""
    settings.AGENTRUN_DISPATCH_WAKE_ON_COMMIT = False
    settings.AGENTRUN_QUEUE_WAKE_ON_COMMIT = False
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = "127.0.0.1:9"
    settings.AGENTRUN_DISPATCH_BACKOFF_BASE_MS = 600_000
    settings.AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS = 600_000


@dataclass(frozen=True)
class World:
    session: Session
    session_run: Run
    dispatched: RunnerDispatchIntent
    retrying: RunnerDispatchIntent
    pending: RunnerDispatchIntent
    running_task: QueueTask
    pending_task: QueueTask
    cancelled_run: Run
    retrying_record: KafkaEventOutbox


def build_world() -> World:
    """Every registered model gets rows; see `World` for the ones tests act on."""
    _webhook_endpoint("tenant-a")  # the tenant of `admit`'s turns
    turn = admit("sess-op-1", "summarise the repo")
    claimed = claim_run(run_id=turn.run.id, runner_id=RUNNER, lease_ms=600_000)
    register_runner(
        scope=Scope.operator(), runner_id=RUNNER, run_id=claimed.id, backend_profile="scripted"
    )
    append_logs(claimed, 3)
    asked = ApprovalRequest(turn.command.id, "world", "command", "run: make", {}, 3600)
    request_approval(
        run_id=claimed.id, runner_id=RUNNER, lease_epoch=claimed.lease_epoch, request=asked
    )
    set_tenant_quota(tenant_id="tenant-a", max_tokens_per_day=1_000_000)
    create_session(
        new=NewSession(
            tenant_id="tenant-a",
            project_id="proj",
            agent={"model": "scripted"},
            environment={"type": "self_hosted"},
            metadata={},
        )
    )
    dispatched, retrying, pending = _intents()
    running_task = file_task(title="fix the flaky test", priority=5)
    pending_task = file_task(title="write the changelog")
    schedule(limit=1)
    cancelled = make_run()
    cancel_run(run_id=cancelled.id, reason="not needed", requested_by="ops")
    issue_api_key(tenant_id="tenant-a", role="client", name="world key")
    Group.objects.get_or_create(name="operators")
    return World(
        session=Session.objects.get(pk="sess-op-1"),
        session_run=Run.objects.get(pk=claimed.id),
        dispatched=RunnerDispatchIntent.objects.get(pk=dispatched.id),
        retrying=RunnerDispatchIntent.objects.get(pk=retrying.id),
        pending=pending,
        running_task=QueueTask.objects.get(pk=running_task.id),
        pending_task=QueueTask.objects.get(pk=pending_task.id),
        cancelled_run=cancelled,
        retrying_record=_outbox_with_one_failing_key(cancelled.id),
    )


def _webhook_endpoint(tenant_id: str) -> None:
    """An endpoint of the world's tenant: every later event gets a delivery (never sent)."""
    with override_settings(AGENTRUN_WEBHOOK_ALLOW_PRIVATE=True, AGENTRUN_WEBHOOK_ALLOW_HTTP=True):
        create_endpoint(
            tenant_id=tenant_id, url="http://127.0.0.1:9/hook", event_types=["*"], description=""
        )


def append_logs(run: Run, count: int) -> None:
    """`count` log events appended by the run's claiming runner."""
    events = [NewEvent("log", {"line": n}) for n in range(count)]
    append_runner_events(
        run_id=run.id, runner_id=str(run.claimed_by), lease_epoch=run.lease_epoch, events=events
    )


def _intents() -> tuple[RunnerDispatchIntent, ...]:
    """One intent dispatched (with its runner job), one waiting to retry after a failed
    launch, one pending: each made by the real dispatch step."""
    first = make_dispatch_command()
    dispatch_batch(launchers={"local": RecordingLauncher()})
    second = make_dispatch_command()
    dispatch_batch(launchers={"local": FailingLauncher()})
    third = make_dispatch_command()
    return tuple(_intent(command) for command in (first, second, third))


def _intent(command: Command) -> RunnerDispatchIntent:
    return RunnerDispatchIntent.objects.get(command=command)


def _outbox_with_one_failing_key(failing_run_id: str) -> KafkaEventOutbox:
    """Relay every record through the relay's own claim and settle, without Kafka: the
    failing run's records go back to retry (with a long backoff), the rest are delivered.
    Returns the failing key's last record."""
    claims = claim_outbox_records(owner="relay-test", limit=500, lease_ms=60_000)
    failure = DeliveryFailure("_TRANSPORT", "broker unreachable")
    outcomes = [failure if c.run_id == failing_run_id else None for c in claims]
    settle_outbox_records(claims=claims, outcomes=outcomes)
    records = KafkaEventOutbox.objects.filter(run_id=failing_run_id)
    return records.order_by("-outbox_seq").first()  # type: ignore[return-value]


def stale_runner(*, minutes: int) -> None:
    """The session run's runner went silent `minutes` ago (its heartbeat time, by SQL)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agentrun_runners SET heartbeat_at = now() - make_interval(mins => %s) "
            "WHERE id = %s",
            [minutes, RUNNER],
        )
