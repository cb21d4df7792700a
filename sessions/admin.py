"""Admin for the sessions app: an operator's view of sessions.

The session row is a projection the runs and sessions services write (every visible
change takes a new global version), so the screen is read-only. Its actions call the
services the API calls: mark read (the reader is `admin:<username>`), evict storage and
cancel the active turn. A session's page links to its active and last runs and to all its
runs.

`SessionReadCursor` is not registered: its primary key is a `CompositePrimaryKey`
(session, reader), which Django admin does not support.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.utils.safestring import SafeString

from agentrun.admin_actions import OperatorActionsMixin, Outcome, operator_id, service_action
from agentrun.admin_console import BigTableAdmin, changelist_link, link, link_column, links
from agentrun.tenancy import Scope
from sessions.models import Session, StorageKind
from sessions.services.lifecycle import mark_session_read, mark_session_storage_evicted
from sessions.services.steering import cancel_session


def _mark_read(request: HttpRequest, session: Session, reason: str) -> Outcome:
    cursor = mark_session_read(
        session_id=session.session_id, scope=Scope.operator(), reader_id=operator_id(request)
    )
    return Outcome(True, f"read by {cursor.reader_id} at version {cursor.session_version}")


def _evict(request: HttpRequest, session: Session, reason: str) -> Outcome:
    if session.storage_kind in (StorageKind.NONE, StorageKind.EVICTED):
        return Outcome(False, f"storage is {session.storage_kind}: nothing to evict")
    evicted = mark_session_storage_evicted(session_id=session.session_id, scope=Scope.operator())
    return Outcome(True, f"storage marked evicted at version {evicted.version}")


def _cancel(request: HttpRequest, session: Session, reason: str) -> Outcome:
    outcome = cancel_session(
        session_id=session.session_id,
        scope=Scope.operator(),
        reason=reason,
        requested_by=operator_id(request),
    )
    if outcome is None:
        return Outcome(False, "no active turn")
    return Outcome(outcome.changed, f"run {outcome.run.id} is {outcome.run.status}")


@admin.register(Session)
class SessionAdmin(OperatorActionsMixin, BigTableAdmin):
    list_display = [
        "session_id",
        "tenant_id",
        "project_id",
        "backend_profile",
        "execution_state",
        "active_run",
        "last_run",
        "storage_kind",
        "version",
        "updated_at",
    ]
    list_filter = [
        "execution_state",
        "backend_profile",
        "tenant_id",
        "storage_kind",
        "updated_at",
        "expires_at",
    ]
    search_fields = ["=session_id", "=tenant_id", "=active_run_id", "=last_run_id"]
    ordering = ["-updated_at"]
    readonly_fields = ["related"]
    actions = [
        service_action(
            name="mark_sessions_read",
            description="Mark selected sessions read (as admin:<you>)",
            perform=_mark_read,
        ),
        service_action(
            name="evict_session_storage",
            description="Mark selected sessions' storage evicted",
            perform=_evict,
        ),
        service_action(
            name="cancel_session_turns",
            description="Cancel the active turn of selected sessions",
            perform=_cancel,
            reason="cancelled by an operator from the admin",
        ),
    ]

    active_run = link_column("runs_run", "active_run_id", "active run")
    last_run = link_column("runs_run", "last_run_id", "last run")

    @admin.display(description="related")
    def related(self, session: Session) -> SafeString:
        return links(
            link("runs_run", session.active_run_id, f"active run {session.active_run_id}"),
            link("runs_run", session.last_run_id, f"last run {session.last_run_id}"),
            changelist_link("runs_run", "all runs", session=session.session_id),
            link("runs_command", session.active_command_id, "active command"),
        )
