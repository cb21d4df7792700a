"""Admin actions: each asks for confirmation, then changes state through the same service
the API calls, and says what happened."""

from __future__ import annotations

import html

import pytest
from django.test import Client
from django.utils import timezone

from agentrun.tenancy import Scope
from dispatch.models import RunnerDispatchIntent
from outbox.models import KafkaEventOutbox
from queues.models import QueueTask
from runs.control_models import CancelRequest
from runs.models import Event, Run
from sessions.models import Session, SessionReadCursor
from sessions.services.lifecycle import (
    StorageFacts,
    refresh_session_storage,
    session_storage_dir,
)
from tests.ops.world import World, build_world

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def world(staff: Client) -> World:
    return build_world()


def act(client: Client, changelist: str, action: str, ids: list[str], **extra: str) -> str:
    """Choose the action, see the confirmation page, confirm; returns the page shown next
    (with its messages), unescaped."""
    chosen = {"action": action, "_selected_action": ids}
    asked = client.post(changelist, chosen)
    assert asked.status_code == 200 and b"are you sure?" in asked.content
    assert all(pk.encode() in asked.content for pk in ids)
    done = client.post(changelist, {**chosen, "confirmed": "yes", **extra}, follow=True)
    assert done.status_code == 200
    return html.unescape(done.content.decode())


def test_cancel_run_asks_then_cancels_through_the_service(staff: Client, world: World) -> None:
    run_id = world.session_run.id
    page = act(staff, "/admin/runs/run/", "cancel_runs", [run_id], reason="stuck, by ops")
    run = Run.objects.get(pk=run_id)
    assert run.status == "cancelled" and run.cancel_reason == "stuck, by ops"
    request = CancelRequest.objects.get(run=run)
    assert request.requested_by == "admin:ops" and request.stage == "terminalized"
    assert f"Cancel selected runs — done: {run_id}: cancelled ({request.id})" in page
    again = act(staff, "/admin/runs/run/", "cancel_runs", [run_id])
    assert f"unchanged: {run_id}: already cancelled" in again


def test_cancel_task_cascades_to_its_run(staff: Client, world: World) -> None:
    task = world.running_task
    page = act(staff, "/admin/queues/queuetask/", "cancel_tasks", [task.id])
    task = QueueTask.objects.get(pk=task.id)
    assert task.state == "cancelled"
    assert Run.objects.get(pk=task.latest_attempt["run_id"]).status == "cancelled"
    assert f"Cancel selected tasks — done: {task.id}: now cancelled" in page


def test_retry_now_makes_a_waiting_intent_due_and_refuses_final_ones(
    staff: Client, world: World
) -> None:
    waiting, final = world.retrying, world.dispatched
    assert waiting.state == "retry" and waiting.next_attempt_at > timezone.now()
    page = act(
        staff, "/admin/dispatch/runnerdispatchintent/", "retry_intents_now", [waiting.id, final.id]
    )
    assert RunnerDispatchIntent.objects.get(pk=waiting.id).next_attempt_at <= timezone.now()
    recorded = Event.objects.get(
        run_id=waiting.run_id, payload__phase="runner-dispatch-retry-requested"
    )
    assert recorded.payload["requested_by"] == "admin:ops"
    assert f"done: {waiting.id}: due now" in page
    assert f"unchanged: {final.id}: it is dispatched, a final state" in page


def test_release_makes_a_retrying_outbox_record_due_now(staff: Client, world: World) -> None:
    record = world.retrying_record
    assert record.attempt_count == 1 and record.next_attempt_at > timezone.now()
    page = act(staff, "/admin/outbox/kafkaeventoutbox/", "release_outbox_records", [record.id])
    key = KafkaEventOutbox.objects.filter(partition_key=record.partition_key, delivered_at=None)
    assert key.count() >= 2 and all(r.next_attempt_at <= timezone.now() for r in key)
    assert all(r.attempt_count == 1 and r.last_error for r in key)  # history is kept
    assert f"done: {record.id}: due now ({key.count()} record(s) of its key released)" in page
    again = act(staff, "/admin/outbox/kafkaeventoutbox/", "release_outbox_records", [record.id])
    assert "unchanged" in again and "already due" in again


def test_mark_read_records_the_admin_user_as_reader(staff: Client, world: World) -> None:
    session = world.session
    page = act(staff, "/admin/agent_sessions/session/", "mark_sessions_read", [session.pk])
    cursor = SessionReadCursor.objects.get(session=session, reader_id="admin:ops")
    assert cursor.session_version == Session.objects.get(pk=session.pk).version
    assert f"done: {session.pk}: read by admin:ops at version {cursor.session_version}" in page


def test_evict_storage_marks_it_evicted_once(staff: Client, world: World, tmp_path) -> None:
    session = world.session
    refresh_session_storage(
        session_id=session.pk,
        scope=Scope.operator(),
        facts=StorageFacts(
            storage_kind="local",
            storage_path=str(session_storage_dir(session.tenant_id, session.pk)),
        ),
    )
    page = act(staff, "/admin/agent_sessions/session/", "evict_session_storage", [session.pk])
    evicted = Session.objects.get(pk=session.pk)
    assert evicted.storage_kind == "evicted" and evicted.storage_evicted_at is not None
    assert f"done: {session.pk}: storage marked evicted at version {evicted.version}" in page
    again = act(staff, "/admin/agent_sessions/session/", "evict_session_storage", [session.pk])
    assert f"unchanged: {session.pk}: storage is evicted: nothing to evict" in again


def test_cancel_session_turn_cancels_its_active_run(staff: Client, world: World) -> None:
    session = world.session
    page = act(staff, "/admin/agent_sessions/session/", "cancel_session_turns", [session.pk])
    assert Run.objects.get(pk=world.session_run.id).status == "cancelled"
    assert Session.objects.get(pk=session.pk).active_run_id is None
    assert f"done: {session.pk}: run {world.session_run.id} is cancelled" in page


def test_actions_are_recorded_in_the_admin_history(staff: Client, world: World) -> None:
    from django.contrib.admin.models import LogEntry

    act(staff, "/admin/runs/run/", "cancel_runs", [world.cancelled_run.id, world.session_run.id])
    entries = LogEntry.objects.filter(object_id=world.session_run.id)
    assert [entry.change_message for entry in entries] == [
        "Cancel selected runs: cancelled ("
        + CancelRequest.objects.get(run_id=world.session_run.id).id
        + ")"
    ]
    assert not LogEntry.objects.filter(object_id=world.cancelled_run.id).exists()  # unchanged
