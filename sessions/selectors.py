"""Reads of the sessions app: scoped lists, the change feed, summaries, trace and output.

Every read starts from `sessions_for(scope=…)` (the tenant gate, `agentrun.tenancy`);
another tenant's session is a 404.
The change feed (`cursor` given) first settles the version feed (`sessions.versions`) so
that walking `version > cursor` never skips a change committed late.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from agentrun import versions
from agentrun.errors import not_found
from agentrun.tenancy import Scope
from runs.control_models import Approval, ApprovalState
from runs.models import Event, Run
from sessions.models import ExecutionState, Session, SessionReadCursor
from sessions.versions import settle_feed

OUTPUT_EVENT_TYPES = (
    "user_message",
    "agent_message",
    "tool_call",
    "tool_output",
    "file_change",
    "error",
    "terminal_status",
)
SESSION_STATES = ("all", "running", "idle", "terminal", "unread", "needs_action")


def sessions_for(*, scope: Scope) -> QuerySet[Session]:
    return scope.filter(Session.objects.all())


def get_session_for(*, scope: Scope, session_id: str) -> Session:
    return scope.get_or_404(Session.objects.all(), session_id, kind="session")


def with_read_version(sessions: QuerySet[Session], reader_id: str | None) -> QuerySet[Session]:
    """The sessions with `read_version` for `reader_id` and their `pending_approvals` (in
    the same statement: a subquery over the partial index of pending approvals)."""
    cursors = SessionReadCursor.objects.all()
    read = versions.with_read_version(
        sessions, cursors, row="session", version="session_version", reader_id=reader_id
    )
    annotated: QuerySet[Session] = read.annotate(
        pending_approvals=pending_approvals_of(OuterRef("session_id"))
    )
    return annotated


def pending_approvals_of(session_id: OuterRef) -> Coalesce:
    pending = (
        Approval.objects.filter(session_id=session_id, state=ApprovalState.PENDING)
        .order_by()
        .values("session_id")
        .annotate(count=Count("id"))
        .values("count")
    )
    return Coalesce(Subquery(pending, output_field=IntegerField()), Value(0))


@dataclass(frozen=True)
class SessionPage:
    items: list[Session]
    next_cursor: int | None


def list_sessions(
    *,
    scope: QuerySet[Session],
    state: str,
    backend_profile: str | None,
    reader_id: str | None,
    cursor: int | None,
    limit: int,
) -> SessionPage:
    """Sessions by state and backend. With `cursor`, the change feed: sessions whose
    version is above it, oldest change first, and the cursor to continue from."""
    sessions = with_read_version(scope, reader_id)
    if backend_profile:
        sessions = sessions.filter(backend_profile=backend_profile)
    if state == "unread":
        sessions = sessions.filter(version__gt=Coalesce("read_version", Value(0)))
    elif state == "needs_action":  # a person must answer an approval (SPEC §9.3)
        sessions = sessions.filter(pending_approvals__gt=0)  # type: ignore[misc]
    elif state != "all":
        sessions = sessions.filter(execution_state=ExecutionState(state))
    if cursor is None:
        items = list(sessions.order_by("-updated_at", "session_id")[:limit])
        return SessionPage(items, None)
    with transaction.atomic():
        settle_feed()
        items = list(sessions.filter(version__gt=cursor).order_by("version")[:limit])
    return SessionPage(items, items[-1].version if items else cursor)


def session_summary(*, session: Session, reader_id: str | None) -> Session:
    """The session with `read_version` for `reader_id`, so `is_unread` can answer."""
    return with_read_version(Session.objects.filter(pk=session.pk), reader_id).get()


def session_runs(*, session: Session) -> QuerySet[Run]:
    """Every run of the session (of its tenant: a session belongs to one)."""
    return Run.objects.filter(tenant_id=session.tenant_id, session_ref__session_id=session.pk)


def resolve_session_run(*, session: Session, run_id: str | None) -> str | None:
    """The run a trace shows: the one asked for (it must be this session's), else the
    active run, else the last one."""
    if run_id is None:
        return session.active_run_id or session.last_run_id
    if not Run.objects.filter(pk=run_id, session_ref__session_id=session.session_id).exists():
        raise not_found("run", run_id)
    return run_id


def session_events(
    *, run_id: str | None, after_seq: int, limit: int, output_only: bool
) -> list[Event]:
    """A page of a session run's events after `after_seq`; output pages hold only what a
    person reads (messages, tool calls and outputs, file changes, errors, terminal)."""
    if run_id is None:
        return []
    events = Event.objects.filter(run_id=run_id, seq__gt=after_seq)
    if output_only:
        events = events.filter(Q(type__in=OUTPUT_EVENT_TYPES))
    return list(events.order_by("seq")[:limit])
