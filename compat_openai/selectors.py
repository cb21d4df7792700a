"""Reads of the Agents API surface: sessions, turns and items, each as the SDK's shape.

Every read starts from the key's scope (`agentrun.tenancy`): another tenant's session, or
a deleted one, is a 404 (the SDK raises `NotFoundError`). Lists are id-cursor pages
(`after`, `limit`, `order`, default newest first), one query for the page plus one per
fact it shows (usage, turn ids, tool outputs) — never one per row.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Q, QuerySet

from agentrun.errors import not_found
from agentrun.tenancy import Scope
from compat_openai import items as item_shapes
from compat_openai import shapes
from compat_openai.models import AgentSessionProfile
from runs.control_models import Approval, ApprovalState
from runs.models import TERMINAL_RUN_STATUSES, Command, Event, Run


def profiles_for(*, scope: Scope) -> QuerySet[AgentSessionProfile]:
    live = AgentSessionProfile.objects.select_related("session").filter(deleted_at__isnull=True)
    return scope.filter(live, "session__tenant_id")


def live_profile(*, session_id: str, scope: Scope) -> AgentSessionProfile:
    """The session's profile if the session is in scope and not deleted, else 404."""
    profile = profiles_for(scope=scope).filter(pk=session_id).first()
    if profile is None:
        raise not_found("session", session_id)
    return profile


def live_profile_any(session_id: str) -> AgentSessionProfile:
    """The session's profile, for a stream already authorized (scope checked at open)."""
    return AgentSessionProfile.objects.select_related("session").get(pk=session_id)


def _cursor_page(
    rows: QuerySet[Any], *, field: str, after: str | None, limit: int, order: str
) -> tuple[list[Any], bool]:
    if after is not None:
        rows = rows.filter(**{f"{field}__{'gt' if order == 'asc' else 'lt'}": after})
    found = list(rows.order_by(field if order == "asc" else f"-{field}")[: limit + 1])
    return found[:limit], len(found) > limit


def _usage_by_session(session_ids: list[str]) -> dict[str, dict[str, Any] | None]:
    payloads: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = Event.objects.filter(type="token_usage", run__session_ref__session_id__in=session_ids)
    for session_id, payload in rows.values_list("run__session_ref__session_id", "payload"):
        payloads[session_id].append(payload)
    return {sid: shapes.usage_of(payloads.get(sid, [])) for sid in session_ids}


def session_shapes(profiles: list[AgentSessionProfile]) -> list[dict[str, Any]]:
    ids = [p.pk for p in profiles]
    usage, actions = _usage_by_session(ids), _required_actions(ids)
    return [
        shapes.session_of(p, usage=usage[p.pk], required_actions=actions.get(p.pk, []))
        for p in profiles
    ]


def _required_actions(session_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The sessions' pending approvals (SPEC §9.3) as the SDK's `mcp_approval_request`
    required actions: answered with `agent.session.input.mcp_approval_request_result`."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    pending = Approval.objects.filter(session_id__in=session_ids, state=ApprovalState.PENDING)
    for approval in pending.order_by("created_at", "id"):
        assert approval.session_id is not None
        found[approval.session_id].append(shapes.required_action_of(approval))
    return found


def get_session(*, scope: Scope, session_id: str) -> dict[str, Any]:
    return session_shapes([live_profile(session_id=session_id, scope=scope)])[0]


def list_sessions(
    *,
    scope: Scope,
    after: str | None,
    limit: int,
    order: str,
    metadata: dict[str, str],
    agent_id: str | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    rows = profiles_for(scope=scope)
    if agent_id is not None:  # `agent_<backend profile>` (shapes.agent_id_of)
        rows = rows.filter(session__backend_profile=agent_id.removeprefix("agent_"))
    if metadata:
        rows = rows.filter(metadata__contains=metadata)
    found, more = _cursor_page(rows, field="session_id", after=after, limit=limit, order=order)
    return session_shapes(found), more


# ---- turns ------------------------------------------------------------------------------


def _session_turns(session_id: str) -> QuerySet[Command]:
    return Command.objects.select_related("run").filter(
        type="turn", run__session_ref__session_id=session_id
    )


def _turn_usage(commands: list[Command]) -> dict[str, dict[str, Any] | None]:
    payloads: dict[str, list[dict[str, Any]]] = defaultdict(list)
    runs = {c.run_id: c.id for c in commands}
    rows = Event.objects.filter(type="token_usage", run_id__in=list(runs))
    for run_id, payload in rows.values_list("run_id", "payload"):
        payloads[runs[run_id]].append(payload)
    return {c.id: shapes.usage_of(payloads.get(c.id, [])) for c in commands}


def turn_shapes(profile: AgentSessionProfile, commands: list[Command]) -> list[dict[str, Any]]:
    usage = _turn_usage(commands)
    agent_id = shapes.agent_id_of(profile)
    return [
        shapes.turn_of(
            c, c.run, agent_id=agent_id, usage=usage[c.id], waiting=c.run.pending_approvals > 0
        )
        for c in commands
    ]


def list_turns(
    *, scope: Scope, session_id: str, after: str | None, limit: int, order: str
) -> tuple[list[dict[str, Any]], bool]:
    profile = live_profile(session_id=session_id, scope=scope)
    rows = _session_turns(session_id)
    found, more = _cursor_page(rows, field="id", after=after, limit=limit, order=order)
    return turn_shapes(profile, found), more


def get_turn(*, scope: Scope, session_id: str, turn_id: str) -> dict[str, Any]:
    profile = live_profile(session_id=session_id, scope=scope)
    command = _session_turns(session_id).filter(pk=turn_id).first()
    if command is None:
        raise not_found("turn", turn_id)
    return turn_shapes(profile, [command])[0]


# ---- items ------------------------------------------------------------------------------


def _item_events(session_id: str, run_id: str | None) -> QuerySet[Event]:
    events = Event.objects.filter(type__in=item_shapes.ITEM_EVENT_TYPES)
    if run_id is not None:
        return events.filter(run_id=run_id)
    return events.filter(run__session_ref__session_id=session_id)


def _after(events: QuerySet[Event], after: str | None, order: str) -> QuerySet[Event]:
    """The events past the cursor item in (run creation, run, seq) order."""
    if after is None:
        return events
    mark = events.filter(pk=after).values("run__created_at", "run_id", "seq").first()
    if mark is None:
        raise not_found("item", after)
    op = "gt" if order == "asc" else "lt"
    created, run_id, seq = mark["run__created_at"], mark["run_id"], mark["seq"]
    return events.filter(
        Q(**{f"run__created_at__{op}": created})
        | Q(run__created_at=created, **{f"run_id__{op}": run_id})
        | Q(run__created_at=created, run_id=run_id, **{f"seq__{op}": seq})
    )


def _items_page(
    session_id: str, run_id: str | None, after: str | None, limit: int, order: str
) -> tuple[list[dict[str, Any]], bool]:
    events = _after(_item_events(session_id, run_id), after, order)
    keys = ("run__created_at", "run_id", "seq")
    ordering = keys if order == "asc" else tuple(f"-{k}" for k in keys)
    found = list(events.order_by(*ordering)[: limit + 1])
    page, more = found[:limit], len(found) > limit
    run_ids = sorted({e.run_id for e in page})
    outputs = {
        (e.run_id, str(e.payload.get("call_id"))): e.payload
        for e in Event.objects.filter(type="tool_output", run_id__in=run_ids)
        if isinstance(e.payload, dict)
    }
    turns: dict[str, str] = {}
    for command in Command.objects.filter(run_id__in=run_ids, type="turn").order_by("-seq"):
        turns[command.run_id] = command.id  # the first turn command of each run wins
    ended = set(
        Run.objects.filter(pk__in=run_ids, status__in=TERMINAL_RUN_STATUSES).values_list(
            "id", flat=True
        )
    )
    return item_shapes.items_of(page, outputs, turns, ended), more


def list_items(
    *, scope: Scope, session_id: str, after: str | None, limit: int, order: str
) -> tuple[list[dict[str, Any]], bool]:
    live_profile(session_id=session_id, scope=scope)
    return _items_page(session_id, None, after, limit, order)


def list_turn_items(
    *, scope: Scope, session_id: str, turn_id: str, after: str | None, limit: int, order: str
) -> tuple[list[dict[str, Any]], bool]:
    live_profile(session_id=session_id, scope=scope)
    command = _session_turns(session_id).filter(pk=turn_id).first()
    if command is None:
        raise not_found("turn", turn_id)
    return _items_page(session_id, command.run_id, after, limit, order)
